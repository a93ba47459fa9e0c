// Machine facts: CPUs, memory, GPUs.
#include "roles/host/machine.h"

#include <gtest/gtest.h>

#include "tests/fakes/machine.h"

namespace onehpc::host {
namespace {

using fakes::Exit;
using fakes::FakeMachine;

TEST(MachineTest, CpusMemoryGpus) {
  FakeMachine m;
  EXPECT_EQ(CountCpus(*m.files).value_or(-1), 2);
  EXPECT_EQ(MemTotalMb(*m.files).value_or(-1), 4000);
  EXPECT_EQ(OsMemoryReserveMb(4000), 400);
  EXPECT_EQ(OsMemoryReserveMb(960), 256);      // small VM: at least 256 MiB
  EXPECT_EQ(OsMemoryReserveMb(512000), 4096);  // big VM: at most 4 GiB
  EXPECT_EQ(RealMemoryMb(960), 704);
  EXPECT_EQ(RealMemoryMb(100), 1);
  m.Write("/proc/meminfo", "MemFree: 1 kB\n");
  EXPECT_FALSE(MemTotalMb(*m.files));
}

// GPUs are registered only when the driver answers, and then exactly the device nodes.
TEST(MachineTest, GpusAreRegisteredOnlyWhenTheDriverAnswersForEveryDeviceNode) {
  FakeMachine m;
  auto none = DetectGpus(*m.files, m.runner);
  EXPECT_TRUE(none.devices.empty());
  EXPECT_TRUE(m.runner.commands().empty());  // no nvidia-smi: nothing run
  // Device nodes without the driver's nvidia-smi: nothing confirms them.
  m.Write("/dev/nvidia0", "");
  m.Write("/dev/nvidia1", "");
  m.Write("/dev/nvidiactl", "");
  m.Write("/dev/nvidia-uvm", "");
  auto unconfirmed = DetectGpus(*m.files, m.runner);
  EXPECT_TRUE(unconfirmed.devices.empty());
  EXPECT_NE(unconfirmed.why.find("no /usr/bin/nvidia-smi"), std::string::npos) << unconfirmed.why;

  m.Write("/usr/bin/nvidia-smi", "");
  const std::string smi = m.files->HostPath("/usr/bin/nvidia-smi");  // the one under the root
  m.runner.On({smi}, Exit(0, "0, Tesla T4\n1, Tesla T4\n"));
  auto two = DetectGpus(*m.files, m.runner);
  EXPECT_EQ(two.devices, (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(two.type, "tesla_t4");
  ASSERT_EQ(m.runner.commands().size(), 1u);
  EXPECT_EQ(m.runner.commands()[0].argv,
            (std::vector<std::string>{smi, "--query-gpu=index,name", "--format=csv,noheader"}));
  EXPECT_EQ(m.runner.commands()[0].timeout, Duration(15000));

  // Two models: the devices, no type (nvidia-smi's order need not be the minors').
  m.runner.On({smi}, Exit(0, "0, NVIDIA A100-SXM4-40GB\n1, Tesla T4\n"));
  auto mixed = DetectGpus(*m.files, m.runner);
  EXPECT_EQ(mixed.devices.size(), 2u);
  EXPECT_EQ(mixed.type, "");
  // The driver sees fewer GPUs than there are device nodes: none (a count Slurm would trust).
  m.runner.On({smi}, Exit(0, "0, Tesla T4\n"));
  auto fewer = DetectGpus(*m.files, m.runner);
  EXPECT_TRUE(fewer.devices.empty());
  EXPECT_NE(fewer.why.find("lists 1 GPUs and /dev has 2"), std::string::npos) << fewer.why;
  // The driver fails, or answers nonsense: none.
  m.runner.On({smi}, Exit(9, "",
                          "NVIDIA-SMI has failed because it couldn't "
                          "communicate with the NVIDIA driver"));
  auto failed = DetectGpus(*m.files, m.runner);
  EXPECT_TRUE(failed.devices.empty());
  EXPECT_NE(failed.why.find("couldn't communicate"), std::string::npos) << failed.why;
  m.runner.On({smi}, Exit(0, "No devices were found\n"));
  EXPECT_TRUE(DetectGpus(*m.files, m.runner).devices.empty());
}

TEST(MachineTest, GresTypeFromModel) {
  EXPECT_EQ(GresTypeFromModel("Tesla T4"), "tesla_t4");
  EXPECT_EQ(GresTypeFromModel("NVIDIA A100-SXM4-40GB"), "nvidia_a100_sxm4_40gb");
  EXPECT_EQ(GresTypeFromModel("  GeForce RTX 3090 (x) "), "geforce_rtx_3090_x");
}

}  // namespace
}  // namespace onehpc::host
