// `one-hpc key-serve` (one-hpc-key-server.socket with Accept=yes, on the Slurm controller):
// the answer to one worker's request for the munge key, on one connection. The socket's I/O
// stays in cli/; this reads what configure left (the munge key, the server's box key pair and,
// through `open_onegate`, the context in kKeyServerContextPath) and decides with
// roles/slurm/key_delivery on the requesting VM as OneGate shows it. No disk probe, no CD
// mount per connection.
#ifndef ONEHPC_ROLES_TIMERS_KEY_SERVER_H_
#define ONEHPC_ROLES_TIMERS_KEY_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "common/error.h"
#include "context/onegate.h"
#include "roles/os/files.h"
#include "roles/slurm/key_delivery.h"

namespace onehpc {

/// OneGate as the key server reaches it (with this VM's own token), or why it cannot now:
/// `retry_why` is what the worker is told to retry for (the opener logs the details).
struct KeyServerOneGate {
  std::unique_ptr<OneGateClient> client;
  std::string retry_why;
};

/// The answer to `line`, the request as read from the connection (or why it could not be
/// read: no answer line then), from `peer`. RETRY while the munge key, the key pair or OneGate
/// is missing; the munge key is registered with the log's redaction before any use.
slurm::KeyAnswer ServeKeyRequest(const Files& files, const Result<std::string>& line,
                                 const std::string& peer,
                                 const std::function<KeyServerOneGate()>& open_onegate);

}  // namespace onehpc

#endif  // ONEHPC_ROLES_TIMERS_KEY_SERVER_H_
