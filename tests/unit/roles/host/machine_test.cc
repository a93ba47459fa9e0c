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
  EXPECT_EQ(CountGpus(*m.files, m.runner), 0);
  EXPECT_TRUE(m.runner.commands().empty());  // no nvidia-smi: nothing run
  m.Write("/dev/nvidia0", "");
  m.Write("/dev/nvidia1", "");
  m.Write("/dev/nvidiactl", "");
  m.Write("/dev/nvidia-uvm", "");
  EXPECT_EQ(CountGpus(*m.files, m.runner), 2);
  FakeMachine smi;
  smi.Write("/usr/bin/nvidia-smi", "");
  smi.runner.On({"/usr/bin/nvidia-smi"}, Exit(0, "3\n3\n3\n"));
  EXPECT_EQ(CountGpus(*smi.files, smi.runner), 3);
  ASSERT_EQ(smi.runner.commands().size(), 1u);
  EXPECT_EQ(smi.runner.commands()[0].timeout, Duration(15000));
  smi.runner.On({"/usr/bin/nvidia-smi"}, Exit(9, "", "NVIDIA-SMI has failed"));
  EXPECT_EQ(CountGpus(*smi.files, smi.runner), 0);
  m.Write("/proc/meminfo", "MemFree: 1 kB\n");
  EXPECT_FALSE(MemTotalMb(*m.files));
}

}  // namespace
}  // namespace onehpc::host
