// Test helper: loop devices on sparse files in a temporary directory, detached and removed
// when the helper is destroyed (also after a failed assertion). Needs root.
#ifndef ONEHPC_TESTS_INTEGRATION_LOOP_DEVICES_H_
#define ONEHPC_TESTS_INTEGRATION_LOOP_DEVICES_H_

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "roles/os/process.h"
#include "tests/integration/helpers.h"

namespace onehpc::testing {

class LoopDevices {
 public:
  LoopDevices() {
    char tmpl[] = "/tmp/onehpc-loop.XXXXXX";
    if (::mkdtemp(tmpl)) dir_ = tmpl;
  }
  ~LoopDevices() {
    for (auto it = devices_.rbegin(); it != devices_.rend(); ++it) {
      Command detach;
      detach.argv = {"losetup", "--detach", *it};
      detach.timeout = Duration(30000);
      (void)runner_.Run(detach);
    }
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }
  LoopDevices(const LoopDevices&) = delete;
  LoopDevices& operator=(const LoopDevices&) = delete;

  /// Why loop-device tests cannot run here, or "" when they can.
  static std::string SkipReason() {
    if (::geteuid() != 0) return "loop devices need root";
    if (::access("/dev/loop-control", F_OK) != 0) return "no /dev/loop-control";
    return "";
  }

  const std::string& dir() const { return dir_; }

  /// A new loop device over a sparse file of `size` bytes.
  Result<std::string> Attach(std::uint64_t size, bool partscan = false) {
    std::string file = dir_ + "/disk" + std::to_string(next_++) + ".img";
    std::error_code error;
    {
      int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      if (fd < 0) return Fail(ErrorKind::kIo, "cannot create " + file);
      ::close(fd);
    }
    std::filesystem::resize_file(file, size, error);
    if (error) return Fail(ErrorKind::kIo, "cannot size " + file + ": " + error.message());
    std::vector<std::string> argv = {"losetup", "--find", "--show"};
    if (partscan) argv.push_back("--partscan");
    argv.push_back(file);
    auto r = Run(argv);
    if (!r) return Fail(r.error());
    std::string device = r->out;
    while (!device.empty() && (device.back() == '\n' || device.back() == ' ')) device.pop_back();
    if (device.rfind("/dev/loop", 0) != 0) {
      return Fail(ErrorKind::kProcess, "losetup printed '" + device + "'");
    }
    devices_.push_back(device);
    return device;
  }

  /// Runs a tool (checked), with optional stdin.
  Result<ProcessResult> Run(std::vector<std::string> argv, std::string stdin_data = "") {
    Command command;
    command.argv = std::move(argv);
    command.stdin_data = std::move(stdin_data);
    command.timeout = Duration(120000);
    return RunChecked(runner_, command);
  }

  /// Writes `data` at `offset` through the device (so that its page cache sees it).
  Status WriteAt(const std::string& device, std::uint64_t offset, const std::string& data) {
    int fd = ::open(device.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Fail(ErrorKind::kIo, "cannot open " + device);
    ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    bool ok = n == static_cast<ssize_t>(data.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) return Fail(ErrorKind::kIo, "cannot write " + device);
    return Ok();
  }

 private:
  RealProcessRunner runner_;
  std::string dir_;
  std::vector<std::string> devices_;
  int next_ = 0;
};

}  // namespace onehpc::testing

#endif  // ONEHPC_TESTS_INTEGRATION_LOOP_DEVICES_H_
