// Typed errors thrown by kernels and allocators. The binding turns each into a JS Error with `code` set,
// and the TS layer maps codes to error classes (see native/src/errors.ts).
#pragma once
#include <stdexcept>
#include <string>

namespace tessera {

enum class ErrorCode { BudgetExceeded, ShapeMismatch, DTypeMismatch, InvalidArgument, Disposed, Unsupported, Device };

inline const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::BudgetExceeded: return "TESSERA_BUDGET_EXCEEDED";
    case ErrorCode::ShapeMismatch: return "TESSERA_SHAPE_MISMATCH";
    case ErrorCode::DTypeMismatch: return "TESSERA_DTYPE_MISMATCH";
    case ErrorCode::InvalidArgument: return "TESSERA_INVALID_ARGUMENT";
    case ErrorCode::Disposed: return "TESSERA_DISPOSED";
    case ErrorCode::Unsupported: return "TESSERA_UNSUPPORTED";
    case ErrorCode::Device: return "TESSERA_DEVICE_ERROR";
  }
  return "TESSERA_ERROR";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

[[noreturn]] inline void fail(ErrorCode code, const std::string& msg) { throw Error(code, msg); }

#define TESSERA_CHECK(cond, code, msg)                \
  do {                                                \
    if (!(cond)) ::tessera::fail((code), (msg));      \
  } while (0)

}  // namespace tessera
