// The munge key's delivery end to end: the real `one-hpc key-serve` (a process per
// connection on a real TCP socket, as systemd's Accept=yes runs it), the OneGate simulator
// over real HTTP, and the worker's side (TcpLineExchange, OpenKeyAnswer). Shows that with
// every OneGate document in hand no munge key can be obtained, that a worker gets it, and
// that forged requests get nothing. The join with the delivered key on real slurmctld and
// slurmd is proven by the lab (tests/lab/lab_oneslurm_test.sh) and the VM tests.
#include "roles/slurm/key_delivery.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "roles/names.h"
#include "roles/os/tcp.h"
#include "roles/slurm/munge.h"
#include "tests/integration/helpers.h"
#include "tests/simulator/onegate_simulator.h"

namespace onehpc {
namespace {

namespace fs = std::filesystem;

sim::NicSpec Nic(const std::string& ip) {
  sim::NicSpec n;
  n.ip = ip;
  n.network = "service";
  n.network_id = "1";
  return n;
}

sim::RoleSpec Role(const std::string& name) {
  sim::RoleSpec r;
  r.name = name;
  return r;
}

void WriteFile(const std::string& path, const std::string& data, mode_t mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
  ::chmod(path.c_str(), mode);
}

// `one-hpc key-serve` behind a listener on 127.0.0.1: one child per connection, the
// connection as its stdin, as systemd's Accept=yes does.
class KeyServer {
 public:
  KeyServer(std::string bin, std::vector<std::string> args, std::string log)
      : bin_(std::move(bin)), args_(std::move(args)), log_(std::move(log)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~KeyServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  void Loop() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::dup2(c, 0);
        int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        ::dup2(out, 1);
        ::dup2(out, 2);
        std::vector<char*> argv{const_cast<char*>(bin_.c_str())};
        for (auto& a : args_) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(bin_.c_str(), argv.data());
        ::_exit(127);
      }
      ::close(c);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  std::string bin_;
  std::vector<std::string> args_;
  std::string log_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class KeyDeliveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("ONEHPC_BIN");
#ifdef ONEHPC_TEST_BIN
    if (!bin) bin = ONEHPC_TEST_BIN;
#endif
    if (!bin) GTEST_SKIP() << "ONEHPC_BIN not set";
    ASSERT_GT(sim_.Start(), 0);
    service_ = sim_.CreateService("OneSlurm", {Role("controller"), Role("worker")});
    sim::VmSpec ctl;
    ctl.nics = {Nic("127.0.0.5")};
    ctl.context = {{"TOKEN", "YES"}, {"ONEAPP_ROLE", "controller"}};
    controller_ = sim_.AddVm(service_, "controller", ctl);
    sim::VmSpec w;
    w.nics = {Nic("127.0.0.1")};  // connections from this test come from 127.0.0.1
    w.context = {{"TOKEN", "YES"}, {"ONEAPP_ROLE", "worker"}};
    worker_ = sim_.AddVm(service_, "worker", w);
    sim::VmSpec o;
    o.nics = {Nic("127.0.0.1")};  // even an outsider on the same address gets nothing
    outsider_ = sim_.AddVm(-1, "", o);

    dir_ = fs::temp_directory_path() / ("onehpc-keys-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    munge_key_ = slurm::RandomBytes(128).value();
    WriteFile(dir_ + "/root/etc/munge/munge.key", munge_key_, 0400);
    server_ = slurm::NewBoxKeyPair().value();
    WriteFile(dir_ + "/root/var/lib/one-hpc/key-server.key",
              server_.secret_key + server_.public_key, 0600);
    // What configure writes for the key server (roles/slurm/key_delivery.h): key-serve reads
    // it, never the CONTEXT CD.
    WriteFile(dir_ + "/root" + slurm::kKeyServerContextPath,
              "ONEGATE_ENDPOINT='" + sim_.Endpoint() + "'\nVMID='" +
                  std::to_string(controller_.id) + "'\nONEGATE_TOKEN='" + controller_.token + "'\n",
              0600);
    // What the controller publishes with READY, as PublishController does.
    sim_.SetUserAttr(controller_.id, "READY", "YES");
    sim_.SetUserAttr(controller_.id, slurm::kAttrControllerAddr, "127.0.0.5");
    sim_.SetUserAttr(controller_.id, slurm::kAttrKeyServerPublicKey,
                     Base64Encode(server_.public_key));
    sim_.SetUserAttr(controller_.id, slurm::kAttrMungeKeyId, slurm::MungeKeyId(munge_key_));
    worker_pair_ = slurm::NewBoxKeyPair().value();
    sim_.SetUserAttr(worker_.id, slurm::kAttrWorkerPublicKey,
                     Base64Encode(worker_pair_.public_key));
    server_log_ = dir_ + "/key-serve.log";
    keys_ = std::make_unique<KeyServer>(
        bin, std::vector<std::string>{"key-serve", "--root", dir_ + "/root"}, server_log_);
  }
  void TearDown() override {
    keys_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result<std::string> Ask(int vm_id, const slurm::BoxKeyPair& pair, std::string* line = nullptr) {
    slurm::KeyRequest request{vm_id, slurm::RandomBytes(slurm::kBoxNonceBytes).value()};
    auto answer = tcp_.Exchange("127.0.0.1", keys_->port(), slurm::FormatKeyRequest(request),
                                Duration(20000), slurm::kMaxKeyLine);
    if (!answer) return Fail(answer.error());
    if (line) *line = *answer;
    return slurm::OpenKeyAnswer(*answer, request, pair, server_.public_key,
                                slurm::MungeKeyId(munge_key_));
  }

  // Every document a reader of OneGate or of the VM templates can see.
  std::vector<std::string> EveryDocument() {
    std::vector<std::string> docs;
    httplib::Client http(sim_.Endpoint());
    for (const auto& vm : {controller_, worker_, outsider_}) {
      httplib::Headers h{{"X-ONEGATE-TOKEN", vm.token}, {"X-ONEGATE-VMID", std::to_string(vm.id)}};
      for (const std::string& path :
           {std::string("/vm"), std::string("/service"), std::string("/service?extended=true"),
            "/vms/" + std::to_string(controller_.id), "/vms/" + std::to_string(worker_.id)}) {
        if (auto r = http.Get(path, h)) docs.push_back(r->body);
      }
      // The operator's view: the whole VM with its TEMPLATE.CONTEXT and USER_TEMPLATE.
      if (auto r = http.Get("/_sim/vms/" + std::to_string(vm.id))) docs.push_back(r->body);
    }
    if (auto r = http.Get("/_sim/vms")) docs.push_back(r->body);
    return docs;
  }

  sim::OneGateSimulator sim_;
  int service_ = -1;
  sim::VmHandle controller_, worker_, outsider_;
  std::string dir_, munge_key_, server_log_;
  slurm::BoxKeyPair server_, worker_pair_;
  std::unique_ptr<KeyServer> keys_;
  TcpLineExchange tcp_;
};

TEST_F(KeyDeliveryTest, TheWorkerGetsTheKeyAndNoDocumentHoldsIt) {
  auto start = std::chrono::steady_clock::now();
  auto key = Ask(worker_.id, worker_pair_);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  ASSERT_TRUE(key) << key.error().message;
  EXPECT_EQ(*key, munge_key_);
  RecordProperty("request_ms", static_cast<int>(took));

  // Neither the key (raw, base64, or the server's secret key) is in any document.
  auto docs = EveryDocument();
  ASSERT_GE(docs.size(), 10u);
  for (const auto& d : docs) {
    EXPECT_EQ(d.find(Base64Encode(munge_key_)), std::string::npos) << d.substr(0, 200);
    EXPECT_EQ(d.find(munge_key_.substr(0, 16)), std::string::npos);
    EXPECT_EQ(d.find(Base64Encode(server_.secret_key)), std::string::npos);
    EXPECT_EQ(d.find(Base64Encode(worker_pair_.secret_key)), std::string::npos);
  }
  // Nor in what the server logged.
  std::ifstream in(server_log_);
  std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("sent the munge key, boxed for VM " + std::to_string(worker_.id)),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find(Base64Encode(munge_key_)), std::string::npos);
  EXPECT_EQ(log.find(controller_.token), std::string::npos);
}

TEST_F(KeyDeliveryTest, ForgedRequestsGetNothing) {
  // Everything an outsider can read: the worker's public key, the server's, the key's id.
  // Its own key pair cannot open the worker's box, whoever's VM id it names.
  auto thief = slurm::NewBoxKeyPair().value();
  std::string line;
  auto stolen = Ask(worker_.id, thief, &line);
  ASSERT_FALSE(stolen);
  EXPECT_NE(stolen.error().message.find("does not open"), std::string::npos);
  EXPECT_EQ(line.find(Base64Encode(munge_key_)), std::string::npos);

  // A VM outside the service, even publishing a public key of its own.
  ASSERT_TRUE(
      sim_.SetUserAttr(outsider_.id, slurm::kAttrWorkerPublicKey, Base64Encode(thief.public_key)));
  auto outside = Ask(outsider_.id, thief, &line);
  ASSERT_FALSE(outside);
  EXPECT_NE(line.find("DENIED VM " + std::to_string(outsider_.id) +
                      " is not a VM of this service (OneGate: HTTP 400)"),
            std::string::npos)
      << line;
  // The controller's own VM id (another role).
  EXPECT_FALSE(Ask(controller_.id, thief, &line));
  EXPECT_NE(line.find("DENIED"), std::string::npos) << line;
  // An outsider cannot put its public key on the worker's VM: OneGate refuses it.
  httplib::Client http(sim_.Endpoint());
  httplib::Headers h{{"X-ONEGATE-TOKEN", outsider_.token},
                     {"X-ONEGATE-VMID", std::to_string(outsider_.id)}};
  auto put =
      http.Put("/vms/" + std::to_string(worker_.id), h,
               std::string(slurm::kAttrWorkerPublicKey) + "=" + Base64Encode(thief.public_key),
               "text/plain");
  ASSERT_TRUE(put);
  EXPECT_GE(put->status, 400);
  EXPECT_EQ(sim_.UserAttr(worker_.id, slurm::kAttrWorkerPublicKey),
            Base64Encode(worker_pair_.public_key));
  // Garbage on the port is answered with a refusal, not a crash.
  auto junk = tcp_.Exchange("127.0.0.1", keys_->port(), "GET / HTTP/1.0", Duration(20000), 4096);
  ASSERT_TRUE(junk) << junk.error().message;
  EXPECT_EQ(junk->rfind("ONEHPC-MUNGE/1 DENIED not a key request", 0), 0u) << *junk;
  // And the worker still gets its key afterwards.
  EXPECT_TRUE(Ask(worker_.id, worker_pair_));
}

TEST_F(KeyDeliveryTest, NoOneGateMeansTryAgainNotDenied) {
  sim_.Stop();
  std::string line;
  auto r = Ask(worker_.id, worker_pair_, &line);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kNetwork) << line;
  EXPECT_NE(line.find("RETRY the controller cannot read VM " + std::to_string(worker_.id) +
                      " from OneGate now"),
            std::string::npos)
      << line;
}

// Before configure has written the key server's context (the socket is up at boot before
// configure runs), a worker is told to try again; nothing looks for the CD.
TEST_F(KeyDeliveryTest, BeforeConfigureTheWorkerIsToldToTryAgain) {
  fs::remove(dir_ + "/root" + slurm::kKeyServerContextPath);
  std::string line;
  auto r = Ask(worker_.id, worker_pair_, &line);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kNetwork) << line;
  EXPECT_NE(line.find("RETRY the key server is not configured yet"), std::string::npos) << line;
  EXPECT_NE(testing::ReadAll(server_log_).find(slurm::kKeyServerContextPath), std::string::npos);
}

}  // namespace
}  // namespace onehpc
