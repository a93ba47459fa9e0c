// Base64 (RFC 4648, standard alphabet), the one implementation of the program: the munge key
// that travels through OneGate (strict) and the text64 ONEAPP_* settings (lenient: operators
// paste wrapped `base64` output).
#ifndef ONEHPC_COMMON_BASE64_H_
#define ONEHPC_COMMON_BASE64_H_

#include <string>
#include <string_view>

#include "common/error.h"

namespace onehpc {

/// Encodes bytes as padded base64 without line breaks.
std::string Base64Encode(std::string_view bytes);

/// Decodes base64 as operators write it: whitespace (line breaks) ignored, '=' padding
/// optional but right when present; otherwise strict (alphabet, length, zero unused bits).
/// kInvalidInput with the reason; the message never quotes the input, which may be secret.
Result<std::string> Base64DecodeLenient(std::string_view text);

/// Decodes canonical base64 only: no whitespace, padded to a multiple of 4, zero unused bits,
/// so that decoding and encoding again give the same text.
Result<std::string> Base64DecodeStrict(std::string_view text);

}  // namespace onehpc

#endif  // ONEHPC_COMMON_BASE64_H_
