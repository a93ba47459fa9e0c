# one-hpc front door. `make test` on a fresh Debian 12 machine (as root) installs what it
# needs, builds, and runs the whole suite.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 60

# ccache keeps compiled objects between runs on the same machine (three builds per `make test`);
# paths are made relative to the checkout, so a fresh clone elsewhere hits the same cache.
# (Checked when the recipe runs, after `deps` may have installed it.)
LAUNCHER := $$(command -v ccache >/dev/null 2>&1 && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
export CCACHE_MAXSIZE ?= 5G

# Debian 12 packages: build, test (real components), lab.
DEPS_BUILD := cmake g++ make pkg-config libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libspdlog-dev \
  libfmt-dev libexpected-dev libcli11-dev libblkid-dev libmount-dev libgtest-dev libgmock-dev \
  libcpp-httplib-dev clang libclang-rt-14-dev libyaml-cpp-dev libsodium-dev ccache \
  clang-format
DEPS_TEST := util-linux e2fsprogs xfsprogs dosfstools fdisk cryptsetup-bin lvm2 systemd \
  iproute2 procps nfs-kernel-server python3 python3-jsonschema shellcheck packer openssh-client \
  mariadb-server mariadb-client squid lintian man-db apache2 libapache2-mod-authnz-external pwauth \
  libapache2-mod-auth-openidc fail2ban nftables curl \
  jq chromium chromium-driver gpg gpg-agent glewlwyd
DEPS_LAB := systemd-container debootstrap munge slurmctld slurmd slurm-client
DEPS := $(DEPS_BUILD) $(DEPS_TEST) $(DEPS_LAB)

.PHONY: all deps build build-product build-asan build-fuzz test test-unit test-vm test-asan test-fuzz package demo bench test-scale clean

all: build

# Installs only what is missing (fast when everything is there). No daemon of these packages
# (Apache, MariaDB, Squid, NFS...) is started by the installation: the tests start their own,
# in namespaces or on loopback (a policy-rc.d is put in place for the install when none exists).
deps:
	@missing=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(DEPS) 2>/dev/null | \
	  awk '$$NF=="installed"{print $$1}' | sort | comm -13 - <(printf '%s\n' $(DEPS) | sort)); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  policy=; if [ ! -e /usr/sbin/policy-rc.d ]; then policy=/usr/sbin/policy-rc.d; \
	    printf '#!/bin/sh\nexit 101\n' > $$policy; chmod 0755 $$policy; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  rc=$$?; if [ -n "$$policy" ]; then rm -f $$policy; fi; exit $$rc; \
	else echo "all build and test packages are installed"; fi

# The normal build. `package` runs cpack alone (CMAKE_SKIP_INSTALL_ALL_DEPENDENCY): the
# targets the .deb installs are built first by whoever asks for it (build, build-product).
CONFIGURE := cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON $(LAUNCHER) >/dev/null
build:
	$(CONFIGURE)
	cmake --build $(BUILD) -j$(JOBS)

# What the lab and VM tests use from the normal build: the program, the OneGate simulator, the
# portal generator's stand-in and the .deb; not the test programs (they run under ASan).
PRODUCT_TARGETS := one-hpc onegate-sim update-ood-portal-standin package_doc
build-product:
	$(CONFIGURE)
	cmake --build $(BUILD) -j$(JOBS) --target $(PRODUCT_TARGETS)
	cmake --build $(BUILD) --target package >/dev/null

build-asan:
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DONEHPC_SANITIZE=address $(LAUNCHER) >/dev/null
	cmake --build $(BUILD_ASAN) -j$(JOBS) --target unit_tests integration_tests one-hpc onegate-sim update-ood-portal-standin

# Only the fuzz targets (they link common/ and context/ alone).
build-fuzz:
	CC=clang CXX=clang++ cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DONEHPC_SANITIZE=fuzzer -DONEHPC_FUZZ_SECONDS=$(FUZZ_SECONDS) $(LAUNCHER) >/dev/null
	cmake --build $(BUILD_FUZZ) -j$(JOBS) --target fuzz_targets

# The whole suite (tests/suite.sh says how it is scheduled on 2 cores): unit + integration
# under ASan/UBSan, every fuzz target for FUZZ_SECONDS, the container lab and the VM smoke
# (tests/vm, real VMs; the image tools come from image-deps) on the normal build. At the end:
# the time of each phase, every skipped test with its reason, and the counts.
test: deps image-deps
	BUILD=$(BUILD) BUILD_ASAN=$(BUILD_ASAN) BUILD_FUZZ=$(BUILD_FUZZ) bash tests/suite.sh

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -L unit

# Every real-VM test (tests/vm): the smoke and the scenarios, two at a time (longest first);
# root, qemu (KVM or TCG). One vCPU per VM: with two tests at once the host's 2 cores are
# oversubscribed, and a second vCPU costs more than it gives (see ONEHPC_VM_CPUS in
# tests/vm/vm_lib.sh).
VM_CPUS ?= 1
test-vm: deps image-deps build
	ONEHPC_VM_CPUS=$(VM_CPUS) ctest --test-dir $(BUILD) --output-on-failure -j2 -L '^vm-'

package: build
	cmake --build $(BUILD) --target package

# The OneSlurm lifecycle for a newcomer, on booted containers (tests/lab/lab_lifecycle_test.sh
# --demo): a service with a controller and 2 workers, sinfo, srun, scale-up, graceful scale-down,
# hard removal and the reconciler; everything is removed at the end. Needs root.
LAB_CACHE ?= /var/cache/one-hpc-bootlab
demo: deps
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "make demo boots containers (systemd-nspawn) and a bridge: it needs root. Run: sudo make demo"; exit 1; fi
	$(MAKE) --no-print-directory build-product
	BOOTLAB_CACHE=$(LAB_CACHE) ONEHPC_BINARY_DIR=$(abspath $(BUILD)) \
	  bash tests/lab/lab_lifecycle_test.sh --demo

# Reconcile, elastic-read and join cost with 10, 100 and 1000 simulated workers (tests/bench/reconcile_bench.sh). Root.
bench:
	@if [ "$$(id -u)" != 0 ]; then echo "make bench runs slurmctld in a network namespace: it needs root"; exit 1; fi
	$(CONFIGURE)
	cmake --build $(BUILD) -j$(JOBS) --target one-hpc onegate-sim
	ONEHPC_BINARY_DIR=$(abspath $(BUILD)) bash tests/bench/reconcile_bench.sh

# A OneSlurm service at scale on booted containers: 1, 10, 25, 50 and 100 workers joining together,
# the scale-down and an elastic scale-up (tests/bench/scale_test.sh; SCALE_SIZES to choose;
# SCALE_SERVICE=ood for the Open OnDemand service). Root; not in `make test` (docs/testing.md
# gives its duration). Writes scale-results.tsv and scale.svg (-ood for Open OnDemand) in the
# build directory.
SCALE_SIZES ?= 1 10 25 50 100
SCALE_SERVICE ?= oneslurm
SCALE_TAG := $(if $(filter ood,$(SCALE_SERVICE)),-ood,)
test-scale: deps
	@if [ "$$(id -u)" != 0 ]; then echo "make test-scale boots containers: it needs root"; exit 1; fi
	$(MAKE) --no-print-directory build-product
	BOOTLAB_CACHE=$(LAB_CACHE) ONEHPC_BINARY_DIR=$(abspath $(BUILD)) SCALE_SERVICE=$(SCALE_SERVICE) \
	  SCALE_RESULTS=$(abspath $(BUILD))/scale-results$(SCALE_TAG).tsv \
	  bash tests/bench/scale_test.sh $(SCALE_SIZES)
	SCALE_SERVICE=$(SCALE_SERVICE) python3 tests/bench/scale_report.py plot \
	  $(BUILD)/scale-results$(SCALE_TAG).tsv $(BUILD)/scale$(SCALE_TAG).svg

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)

# make image, make image-base (image-build/README.md)
include image-build/image.mk
