// Strict base64 (RFC 4648, standard alphabet, padded, no line breaks) for the munge key that
// travels through OneGate.
#ifndef ONEHPC_ROLES_SLURM_BASE64_H_
#define ONEHPC_ROLES_SLURM_BASE64_H_

#include <string>
#include <string_view>

#include "common/error.h"

namespace onehpc::slurm {

/// Encodes bytes as padded base64 without line breaks.
std::string Base64Encode(std::string_view bytes);

/// Decodes strict base64: length a multiple of 4, only the standard alphabet, '=' only as
/// final padding, no whitespace. kInvalidInput otherwise (the message never echoes the input).
Result<std::string> Base64DecodeStrict(std::string_view text);

}  // namespace onehpc::slurm

#endif  // ONEHPC_ROLES_SLURM_BASE64_H_
