#include "roles/timers/key_server.h"

#include "common/base64.h"
#include "common/log.h"
#include "roles/names.h"
#include "roles/slurm/munge.h"

namespace onehpc {

slurm::KeyAnswer ServeKeyRequest(const Files& files, const Result<std::string>& line,
                                 const std::string& peer,
                                 const std::function<KeyServerOneGate()>& open_onegate) {
  if (!line) return slurm::KeyAnswer{false, "", "no request: " + line.error().message};
  auto request = slurm::ParseKeyRequest(*line);
  if (!request) {
    return slurm::KeyAnswer{false,
                            std::string(slurm::kKeyProtocol) + " DENIED " + request.error().message,
                            "denied: " + request.error().message};
  }
  log::Info("key-serve: request of VM {} from {}", request->vm_id, peer);
  slurm::KeyServerSecrets secrets;
  auto munge_key = files.ReadIfExists(slurm::kMungeKeyPath);
  if (!munge_key || !munge_key->has_value() || !slurm::CheckMungeKey(**munge_key)) {
    return slurm::RetryAnswer("the controller has no munge key yet");
  }
  secrets.munge_key = **munge_key;
  log::AddSecret(Base64Encode(secrets.munge_key));
  auto pair = slurm::ReadBoxKeyPair(files, slurm::kKeyServerKeyPath);
  if (!pair || !pair->has_value()) {
    if (!pair) log::Error("key-serve: {}", pair.error().message);
    return slurm::RetryAnswer("the key server has no key pair yet");
  }
  secrets.server = **pair;
  auto onegate = open_onegate();
  if (!onegate.client) return slurm::RetryAnswer(onegate.retry_why);
  // With this VM's own token: OneGate shows only a VM of this VM's own service; one VM's
  // document, whatever the size of the service.
  return slurm::DecideKeyRequest(*onegate.client, *request, peer, slurm::kWorkerRole, secrets);
}

}  // namespace onehpc
