#include "common/base64.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

namespace onehpc {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    size_t n = std::min<size_t>(3, bytes.size() - i);
    std::uint32_t v = static_cast<std::uint8_t>(bytes[i]) << 16;
    if (n > 1) v |= static_cast<std::uint8_t>(bytes[i + 1]) << 8;
    if (n > 2) v |= static_cast<std::uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += n > 1 ? kAlphabet[(v >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[v & 63] : '=';
  }
  return out;
}

Result<std::string> Base64DecodeLenient(std::string_view text) {
  std::string digits;
  std::vector<size_t> positions;  // 1-based offsets in `text`, for messages
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsSpace(text[i])) continue;
    digits.push_back(text[i]);
    positions.push_back(i + 1);
  }
  size_t padding = 0;
  while (!digits.empty() && digits.back() == '=') {
    digits.pop_back();
    ++padding;
  }
  for (size_t i = 0; i < digits.size(); ++i) {
    if (Digit(digits[i]) < 0) {
      return Fail(ErrorKind::kInvalidInput,
                  fmt::format("the character at position {} is {}", positions[i],
                              digits[i] == '=' ? "'=' padding in the middle of the text"
                                               : "not in the base64 alphabet A-Z a-z 0-9 + /"));
    }
  }
  if (padding > 2 || (padding > 0 && (digits.size() + padding) % 4 != 0)) {
    return Fail(ErrorKind::kInvalidInput, "the '=' padding at the end is wrong");
  }
  if (digits.size() % 4 == 1) {
    return Fail(ErrorKind::kInvalidInput,
                "the length is impossible for base64 (truncated or extra character?)");
  }
  std::string out;
  out.reserve(digits.size() * 3 / 4);
  std::uint32_t bits = 0;
  int nbits = 0;
  for (char c : digits) {
    bits = (bits << 6) | static_cast<std::uint32_t>(Digit(c));
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(static_cast<char>((bits >> nbits) & 0xff));
    }
  }
  if (nbits > 0 && (bits & ((1u << nbits) - 1)) != 0) {
    return Fail(ErrorKind::kInvalidInput,
                "the last character has non-zero unused bits (truncated or corrupted?)");
  }
  return out;
}

Result<std::string> Base64DecodeStrict(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsSpace(text[i])) {
      return Fail(ErrorKind::kInvalidInput,
                  fmt::format("not strict base64: whitespace at position {}", i + 1));
    }
  }
  if (text.size() % 4 != 0) {
    return Fail(ErrorKind::kInvalidInput,
                fmt::format("not strict base64: length {} is not a multiple of 4", text.size()));
  }
  auto decoded = Base64DecodeLenient(text);
  if (!decoded) return Fail(decoded.error().WithContext("not strict base64"));
  return decoded;
}

}  // namespace onehpc
