// Expression trees for the symbolic workload: sums, products, negation and
// small integer powers over a few named variables, with integer constants
// modulo a prime so arithmetic never overflows and results are exact.
#pragma once

#include <cstdint>
#include <memory>

#include "counting.h"

namespace sym {

constexpr int64_t kModulus = 1'000'003;
constexpr int kVars = 6;

enum class Op : uint8_t { Num, Var, Add, Mul, Neg, Pow };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  Op op = Op::Num;
  int64_t num = 0;  // Num: value in [0, kModulus); Pow: the exponent
  int var = 0;      // Var: index into variable_name()
  Vec<ExprPtr> kids;

  // Tree nodes are the bulk of the allocations: count them exactly.
  static void* operator new(size_t n) {
    live_bytes().add(n);
    return ::operator new(n);
  }
  static void operator delete(void* p, size_t n) {
    live_bytes().sub(n);
    ::operator delete(p, n);
  }
};

// Some names fit in the std::string small buffer, some do not, so variable
// tokens exercise both the inline and the heap string paths.
const Str& variable_name(int index);
int variable_index(const Str& name);  // -1 if unknown

ExprPtr make_num(int64_t value);
ExprPtr make_var(int index);
ExprPtr make_node(Op op, Vec<ExprPtr> kids, int64_t num = 0);
ExprPtr clone(const Expr& e);

ExprPtr random_expr(wl::Rng& rng, int depth);  // expr_gen.cc

Str print(const Expr& e);      // expr_text.cc: fully parenthesised text
ExprPtr parse(const Str& text);  // expr_text.cc: inverse of print()

ExprPtr simplify(const Expr& e);           // expr_rewrite.cc
ExprPtr derive(const Expr& e, int var);    // expr_rewrite.cc

}  // namespace sym
