# one-hpc appliance images (Packer HCL2, Debian's packer 1.6.6 and later), in the style of the
# OpenNebula one-apps builds: a QEMU source boots the Debian base image
# (make-base-image.sh) with a build-time CONTEXT CD-ROM that carries root's SSH key for this
# build; the provisioners copy the project's .deb and run install-appliance.sh, the same
# install steps the test lab uses; the disk is trimmed (build-image.sh then zeroes the free
# blocks left and compresses it).
#
# Normally run through build-image.sh, which makes the key and the CONTEXT files:
#   packer build -var appliance=oneslurm -var base_image=... -var deb=... \
#     -var context_dir=... -var ssh_private_key_file=... -var output_dir=... appliance.pkr.hcl

variable "appliance" {
  type        = string
  default     = "oneslurm"
  description = "Which appliance to build: oneslurm or open-ondemand."
  validation {
    condition     = contains(["oneslurm", "open-ondemand"], var.appliance)
    error_message = "The appliance must be oneslurm or open-ondemand."
  }
}

# Open OnDemand for the open-ondemand appliance: the ondemand package of one release from OSC's
# apt repository, and Node.js 20 from NodeSource's (Open OnDemand 4 needs it; Debian 12 has
# 18), each repository trusted through its signing key only if that key has the pinned
# fingerprint (apt-source.sh). The defaults are the addresses and fingerprints OSC's and
# NodeSource's own installation material names; a site mirroring them passes its own.
# ondemand_release = "none": an image without Open OnDemand, named open-ondemand-without-ood.
# (No validation blocks: with several variables that have one, Debian's packer 1.6.6 refused
# valid defaults at random. build-image.sh, install-appliance.sh and apt-source.sh check them.)
variable "ondemand_release" {
  type        = string
  default     = "4.0"
  description = "Open OnDemand release (4.0) for the open-ondemand appliance, or none."
}

variable "ondemand_repo" {
  type        = string
  default     = "https://apt.osc.edu/ondemand"
  description = "OSC's apt repositories; the release's is <ondemand_repo>/<release>/web/apt."
}

variable "ondemand_key_url" {
  type        = string
  default     = "https://apt.osc.edu/ondemand/DEB-GPG-KEY-ondemand"
  description = "Where OSC publishes the key that signs ondemand_repo."
}

variable "ondemand_key_fingerprint" {
  type        = string
  default     = "FE143EA1CB378B569BBF7C544B72FE2B92D31755"
  description = "The fingerprint the key at ondemand_key_url must have (40 hex digits)."
}

variable "nodejs_repo" {
  type        = string
  default     = "https://deb.nodesource.com/node_20.x"
  description = "Node.js repository (suite nodistro) installed with Open OnDemand; empty: none."
}

variable "nodejs_key_url" {
  type        = string
  default     = "https://deb.nodesource.com/gpgkey/nodesource-repo.gpg.key"
  description = "Where NodeSource publishes the key that signs nodejs_repo."
}

variable "nodejs_key_fingerprint" {
  type        = string
  default     = "6F71F525282841EEDAF851B42F59B5F99B1BE0B4"
  description = "The fingerprint the key at nodejs_key_url must have (40 hex digits)."
}

variable "base_image" {
  type        = string
  description = "The Debian 12 or 13 base qcow2 made by make-base-image.sh."
}

variable "base_image_checksum" {
  type        = string
  default     = "none"
  description = "sha256:<hex> of base_image (build-image.sh computes it)."
}

variable "deb" {
  type        = string
  default     = ""
  description = "The one-hpc .deb (make package); empty: build the packages layer only."
}

variable "one_context_deb" {
  type        = string
  default     = ""
  description = "Optional: a local OpenNebula one-context .deb to install too (not in Debian)."
}

variable "context_dir" {
  type        = string
  description = "Directory holding the build-time context.sh (SSH_PUBLIC_KEY of this build)."
}

variable "ssh_private_key_file" {
  type        = string
  description = "Private key matching the SSH_PUBLIC_KEY of the build-time context."
}

variable "output_dir" {
  type        = string
  description = "Where Packer writes the image (must not exist)."
}

variable "accelerator" {
  type        = string
  default     = "kvm"
  description = "kvm, or tcg to build by emulation where KVM cannot run the VM."
}

variable "ssh_timeout" {
  type    = string
  default = "15m"
}

variable "serial_log" {
  type        = string
  default     = "/dev/null"
  description = "File that receives the build VM's serial console."
}

variable "cpus" {
  type    = number
  default = 2
}

variable "memory" {
  type    = number
  default = 2048
}

locals {
  role_packages = {
    "oneslurm"      = "slurm"
    "open-ondemand" = "ood"
  }[var.appliance]
  # The packages layer: the role packages only; no .deb, not sealed (the appliance stage seals).
  install_args  = var.deb == "" ? "" : "--deb /tmp/one-hpc.deb --clean-image"
  with_ondemand = var.appliance == "open-ondemand" && var.ondemand_release != "none"
  # What the image is called: an Open OnDemand image without Open OnDemand says so.
  image_name = var.appliance == "open-ondemand" && var.ondemand_release == "none" ? "open-ondemand-without-ood" : var.appliance
  nodejs_args = var.nodejs_repo == "" ? "" : join(" ", [
    "--nodejs-repo '${var.nodejs_repo}' --nodejs-key '${var.nodejs_key_url}'",
    "--nodejs-fingerprint '${replace(var.nodejs_key_fingerprint, " ", "")}'",
  ])
  ondemand_args = local.with_ondemand ? join(" ", [
    "--ondemand-repo '${var.ondemand_repo}/${var.ondemand_release}/web/apt'",
    "--ondemand-key '${var.ondemand_key_url}'",
    "--ondemand-fingerprint '${replace(var.ondemand_key_fingerprint, " ", "")}'",
    local.nodejs_args,
  ]) : ""
  one_context_steps = var.one_context_deb == "" ? ["true"] : [
    "set -e",
    "apt-get update -q",
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/one-context.deb",
  ]
}

source "qemu" "appliance" {
  accelerator  = var.accelerator
  cpus         = var.cpus
  memory       = var.memory
  headless     = true
  iso_url      = var.base_image
  iso_checksum = var.base_image_checksum
  disk_image   = true
  # Keep the base image's virtual size (the partition does not grow with the disk).
  skip_resize_disk = true
  disk_interface   = "virtio"
  net_device       = "virtio-net"
  format           = "qcow2"
  # Trim on the way out: the image keeps only what the appliance uses. Not compressed here:
  # build-image.sh zeroes the free blocks the trim leaves behind, then compresses the image
  # (the packages layer is a build cache and stays uncompressed).
  disk_discard       = "unmap"
  disk_detect_zeroes = "unmap"
  disk_compression   = false
  output_directory   = var.output_dir
  vm_name            = "${local.image_name}.qcow2"
  # The build-time CONTEXT CD-ROM, labelled like OpenNebula's.
  cd_files = ["${var.context_dir}/context.sh"]
  cd_label = "CONTEXT"
  qemuargs = [
    ["-serial", "file:${var.serial_log}"],
  ]
  communicator         = "ssh"
  ssh_username         = "root"
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = var.ssh_timeout
  shutdown_command     = "poweroff"
  shutdown_timeout     = "5m"
}

build {
  sources = ["source.qemu.appliance"]

  provisioner "file" {
    # An empty file for the packages layer (install_args does not name it then).
    source      = var.deb == "" ? "${var.context_dir}/context.sh" : var.deb
    destination = "/tmp/one-hpc.deb"
  }

  provisioner "file" {
    source      = "${path.root}/install-appliance.sh"
    destination = "/tmp/install-appliance.sh"
  }

  provisioner "file" {
    source      = "${path.root}/apt-source.sh"
    destination = "/tmp/apt-source.sh"
  }

  provisioner "file" {
    # An empty file when no one-context package is given.
    source      = var.one_context_deb == "" ? "${var.context_dir}/context.sh" : var.one_context_deb
    destination = "/tmp/one-context.deb"
  }

  provisioner "shell" {
    # Before one-hpc's .deb, whose postinst hooks one-hpc into one-context.
    inline = local.one_context_steps
  }

  provisioner "shell" {
    inline = [
      "set -e",
      "sh /tmp/install-appliance.sh --role-packages ${local.role_packages} ${local.install_args} ${local.ondemand_args}",
      # The build's SSH key must not stay in the image (context-lite or one-context installs
      # the operator's keys at every boot).
      "rm -f /root/.ssh/authorized_keys",
      "fstrim -av || true",
    ]
  }
}
