# image-build/image.mk - appliance images (included by the top-level Makefile).
#
#   make image                      the Debian 13 base image, then the OneSlurm appliance (Slurm
#                                   24.11); IMAGE_SUITE=bookworm: on Debian 12 (Slurm 22.05)
#   make image IMAGE_APPLIANCE=open-ondemand    on Debian 12, with Open OnDemand IMAGE_OOD_RELEASE (4.0) from
#                                               OSC's apt repository (image-build/README.md,
#                                               "Open OnDemand itself"); IMAGE_OOD_RELEASE=none:
#                                               without it, open-ondemand-without-ood/...qcow2
#   make image-base                 only the base image
#   make image IMAGE_ACCEL=tcg      without a KVM that boots BIOS guests (emulation, slow)
#
# Needs root, a usable /dev/kvm and the Debian packages in DEPS_IMAGE (installed by
# image-deps). Output in $(IMAGE_DIR): debian-<release>-base.qcow2, <appliance>/<appliance>.qcow2, and
# the appliance's packages layer <appliance>-deb<release>-packages/<appliance>.qcow2 (the role packages on
# the base; rebuilt only when the install steps, the Packer files or the base change), from
# which each image build starts: a new .deb costs a boot, its install and the sealing.
IMAGE_DIR ?= $(BUILD)/image
IMAGE_APPLIANCE ?= oneslurm
IMAGE_ACCEL ?= kvm
# The Debian release: OneSlurm on Debian 13 (trixie) unless IMAGE_SUITE=bookworm; Open
# OnDemand on Debian 12 (bookworm), the release OSC publishes Open OnDemand for.
ifeq ($(IMAGE_APPLIANCE),open-ondemand)
IMAGE_SUITE ?= bookworm
ifneq ($(IMAGE_SUITE),bookworm)
$(error IMAGE_SUITE=$(IMAGE_SUITE): the Open OnDemand appliance is built on bookworm (Debian 12), the release OSC publishes Open OnDemand for)
endif
else
IMAGE_SUITE ?= trixie
endif
ifeq ($(filter bookworm trixie,$(IMAGE_SUITE)),)
$(error IMAGE_SUITE=$(IMAGE_SUITE): expected trixie (Debian 13) or bookworm (Debian 12))
endif
IMAGE_RELEASE := $(if $(filter trixie,$(IMAGE_SUITE)),13,12)
IMAGE_BASE ?= $(IMAGE_DIR)/debian-$(IMAGE_RELEASE)-base.qcow2
IMAGE_OOD_RELEASE ?= 4.0
# Where the image will be downloaded from, for its marketplace metadata (<name>.yaml beside it).
IMAGE_URL ?=
# The image's name (build-image.sh names it the same way) and its packages layer, per release.
ifeq ($(IMAGE_APPLIANCE),open-ondemand)
IMAGE_OOD_ARGS := --ondemand-release $(IMAGE_OOD_RELEASE)
IMAGE_NAME := $(if $(filter none,$(IMAGE_OOD_RELEASE)),open-ondemand-without-ood,open-ondemand)
IMAGE_LAYER = $(IMAGE_NAME)$(if $(filter none,$(IMAGE_OOD_RELEASE)),,-$(IMAGE_OOD_RELEASE))-deb$(IMAGE_RELEASE)-packages
else
IMAGE_OOD_ARGS :=
IMAGE_NAME := $(IMAGE_APPLIANCE)
IMAGE_LAYER = $(IMAGE_NAME)-deb$(IMAGE_RELEASE)-packages
endif
DEPS_IMAGE := packer qemu-system-x86 qemu-utils mmdebstrap extlinux syslinux-common xorriso \
  openssh-client fdisk e2fsprogs genisoimage grub-efi-amd64-bin dosfstools mtools ovmf

.PHONY: image image-base image-deps

image-deps:
	@missing=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(DEPS_IMAGE) 2>/dev/null | \
	  awk '$$NF=="installed"{print $$1}' | sort | comm -13 - <(printf '%s\n' $(DEPS_IMAGE) | sort)); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(IMAGE_BASE): image-build/make-base-image.sh image-build/lib.sh $(wildcard image-build/base/*) | image-deps
	bash image-build/make-base-image.sh --suite $(IMAGE_SUITE) --output $@

image-base: $(IMAGE_BASE)

IMAGE_PACKAGES := $(IMAGE_DIR)/$(IMAGE_LAYER)/$(IMAGE_NAME).qcow2
$(IMAGE_PACKAGES): image-build/install-appliance.sh image-build/apt-source.sh \
    image-build/appliance.pkr.hcl image-build/build-image.sh image-build/lib.sh $(IMAGE_BASE) | image-deps
	rm -rf $(IMAGE_DIR)/$(IMAGE_LAYER)
	bash image-build/build-image.sh --appliance $(IMAGE_APPLIANCE) --accel $(IMAGE_ACCEL) --base $(IMAGE_BASE) \
	  $(IMAGE_OOD_ARGS) --packages-only --output $(IMAGE_DIR)/$(IMAGE_LAYER)

# The .deb: the host's `make package` for Debian 12 (on a Debian 12 host), else built against
# the release's own libraries in its build root (build-deb.sh).
ifeq ($(IMAGE_SUITE),bookworm)
IMAGE_DEB_STEP := package
IMAGE_DEB = $$(ls -t $(BUILD)/one-hpc_*.deb | head -n1)
else
IMAGE_DEB_STEP :=
IMAGE_DEB = $$(ls $(IMAGE_DIR)/deb-$(IMAGE_SUITE)/one-hpc_*.deb | head -n1)
endif

image: image-deps $(IMAGE_DEB_STEP) $(IMAGE_PACKAGES)
	if [ "$(IMAGE_SUITE)" != bookworm ]; then rm -rf $(IMAGE_DIR)/deb-$(IMAGE_SUITE) && \
	  bash image-build/build-deb.sh --suite $(IMAGE_SUITE) --output $(IMAGE_DIR)/deb-$(IMAGE_SUITE); fi
	rm -rf $(IMAGE_DIR)/$(IMAGE_NAME)
	bash image-build/build-image.sh --appliance $(IMAGE_APPLIANCE) --accel $(IMAGE_ACCEL) --base $(IMAGE_PACKAGES) \
	  $(IMAGE_OOD_ARGS) --deb "$(IMAGE_DEB)" $(if $(IMAGE_URL),--image-url "$(IMAGE_URL)") --output $(IMAGE_DIR)/$(IMAGE_NAME)
