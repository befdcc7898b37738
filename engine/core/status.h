// Status helpers: errors are values (absl::Status) that carry the field or offset they concern.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LOCKSTEP_CONCAT_INNER(a, b) a##b
#define LOCKSTEP_CONCAT(a, b) LOCKSTEP_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status lockstep_status_ = (expr);      \
    if (!lockstep_status_.ok()) return lockstep_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MaybeX());` binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL(LOCKSTEP_CONCAT(lockstep_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                          \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
