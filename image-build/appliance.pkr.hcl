# one-hpc appliance images (Packer HCL2, Debian's packer 1.6.6 and later), in the style of the
# OpenNebula one-apps builds: a QEMU source boots the Debian 12 base image
# (make-base-image.sh) with a build-time CONTEXT CD-ROM that carries root's SSH key for this
# build; the provisioners copy the project's .deb and run install-appliance.sh, the same
# install steps the test lab uses; the disk is trimmed and written compressed.
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

variable "base_image" {
  type        = string
  description = "The Debian 12 base qcow2 made by make-base-image.sh."
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
  install_args = var.deb == "" ? "" : "--deb /tmp/one-hpc.deb --clean-image"
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
  # Trim on the way out and compress: the image keeps only what the appliance uses. The
  # packages layer is a build cache: not compressed (faster to write and to read back).
  disk_discard       = "unmap"
  disk_detect_zeroes = "unmap"
  disk_compression   = var.deb != ""
  output_directory   = var.output_dir
  vm_name            = "${var.appliance}.qcow2"
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
      "sh /tmp/install-appliance.sh --role-packages ${local.role_packages} ${local.install_args}",
      # The build's SSH key must not stay in the image (context-lite or one-context installs
      # the operator's keys at every boot).
      "rm -f /root/.ssh/authorized_keys",
      "fstrim -av || true",
    ]
  }

  post-processor "checksum" {
    checksum_types = ["sha256"]
    output         = "${var.output_dir}/${var.appliance}.qcow2.{{.ChecksumType}}"
  }
}
