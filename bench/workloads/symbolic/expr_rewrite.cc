// Term rewriting: algebraic simplification and symbolic differentiation.
// Both are functional — they build a fresh tree and leave the input alone —
// which is what makes them allocation-heavy, like a real rewriting engine.
#include "expr.h"

namespace sym {

namespace {

int64_t mod_mul(int64_t a, int64_t b) { return (a * b) % kModulus; }

// Simplified children of an Add/Mul, with nested nodes of the same kind
// spliced in (associativity) and constants folded into one.
ExprPtr fold_assoc(const Expr& e) {
  bool is_add = e.op == Op::Add;
  int64_t constant = is_add ? 0 : 1;
  Vec<ExprPtr> terms;
  auto take = [&](ExprPtr k) {
    if (k->op == Op::Num) {
      constant = is_add ? (constant + k->num) % kModulus : mod_mul(constant, k->num);
    } else {
      terms.push_back(std::move(k));
    }
  };
  for (const auto& kid : e.kids) {
    ExprPtr s = simplify(*kid);
    if (s->op == e.op) {
      for (auto& grandkid : s->kids) take(std::move(grandkid));
    } else {
      take(std::move(s));
    }
  }
  if (!is_add && constant == 0) return make_num(0);
  if (constant != (is_add ? 0 : 1) || terms.empty()) terms.push_back(make_num(constant));
  if (terms.size() == 1) return std::move(terms[0]);
  return make_node(e.op, std::move(terms));
}

}  // namespace

ExprPtr simplify(const Expr& e) {
  switch (e.op) {
    case Op::Num:
    case Op::Var:
      return clone(e);
    case Op::Neg: {
      ExprPtr k = simplify(*e.kids[0]);
      if (k->op == Op::Num) return make_num(-k->num);
      if (k->op == Op::Neg) return std::move(k->kids[0]);
      Vec<ExprPtr> kids;
      kids.push_back(std::move(k));
      return make_node(Op::Neg, std::move(kids));
    }
    case Op::Pow: {
      ExprPtr base = simplify(*e.kids[0]);
      if (e.num == 0) return make_num(1);
      if (e.num == 1) return base;
      if (base->op == Op::Num) {
        int64_t r = 1;
        for (int64_t i = 0; i < e.num; ++i) r = mod_mul(r, base->num);
        return make_num(r);
      }
      Vec<ExprPtr> kids;
      kids.push_back(std::move(base));
      return make_node(Op::Pow, std::move(kids), e.num);
    }
    case Op::Add:
    case Op::Mul:
      return fold_assoc(e);
  }
  wl::die("bad expression node");
}

ExprPtr derive(const Expr& e, int var) {
  switch (e.op) {
    case Op::Num:
      return make_num(0);
    case Op::Var:
      return make_num(e.var == var ? 1 : 0);
    case Op::Neg:
    case Op::Add: {
      Vec<ExprPtr> kids;
      for (const auto& k : e.kids) kids.push_back(derive(*k, var));
      return make_node(e.op, std::move(kids));
    }
    case Op::Mul: {
      // Product rule over n factors: sum of products with one factor derived.
      Vec<ExprPtr> sum;
      for (size_t i = 0; i < e.kids.size(); ++i) {
        Vec<ExprPtr> factors;
        for (size_t j = 0; j < e.kids.size(); ++j)
          factors.push_back(i == j ? derive(*e.kids[j], var) : clone(*e.kids[j]));
        sum.push_back(make_node(Op::Mul, std::move(factors)));
      }
      return make_node(Op::Add, std::move(sum));
    }
    case Op::Pow: {
      if (e.num == 0) return make_num(0);
      Vec<ExprPtr> lowered;
      lowered.push_back(clone(*e.kids[0]));
      Vec<ExprPtr> factors;
      factors.push_back(make_num(e.num));
      factors.push_back(make_node(Op::Pow, std::move(lowered), e.num - 1));
      factors.push_back(derive(*e.kids[0], var));
      return make_node(Op::Mul, std::move(factors));
    }
  }
  wl::die("bad expression node");
}

}  // namespace sym
