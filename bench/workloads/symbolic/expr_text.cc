// Text form of expression trees. Printing concatenates many temporary
// strings and parsing builds a token vector of small strings — the
// string-churn allocation pattern of interpreters and document processors.
//
// Grammar (everything compound is parenthesised, so no precedence rules):
//   expr := number | name | "(" "-" expr ")" | "(" expr "^" number ")"
//         | "(" expr ("+" expr)+ ")" | "(" expr ("*" expr)+ ")"
#include <cctype>

#include "expr.h"

namespace sym {

namespace {

Str number_text(int64_t n) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return Str(buf);
}

}  // namespace

Str print(const Expr& e) {
  switch (e.op) {
    case Op::Num:
      return number_text(e.num);
    case Op::Var:
      return variable_name(e.var);
    case Op::Neg:
      return "(-" + print(*e.kids[0]) + ")";
    case Op::Pow:
      return "(" + print(*e.kids[0]) + "^" + number_text(e.num) + ")";
    case Op::Add:
    case Op::Mul: {
      const char* sep = e.op == Op::Add ? " + " : " * ";
      Str out = "(";
      for (size_t i = 0; i < e.kids.size(); ++i) {
        if (i > 0) out += sep;
        out += print(*e.kids[i]);
      }
      return out + ")";
    }
  }
  wl::die("bad expression node");
}

namespace {

Vec<Str> tokenize(const Str& text) {
  Vec<Str> tokens;
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == ' ') {
      ++i;
    } else if (std::isalnum(c) || c == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      tokens.push_back(text.substr(i, j - i));
      i = j;
    } else {
      tokens.emplace_back(1, static_cast<char>(c));
      ++i;
    }
  }
  return tokens;
}

class Parser {
 public:
  explicit Parser(const Vec<Str>& tokens) : t_(tokens) {}

  ExprPtr expr() {
    const Str& tok = next();
    if (std::isdigit(static_cast<unsigned char>(tok[0]))) return make_num(std::atoll(tok.c_str()));
    if (tok != "(") {
      int v = variable_index(tok);
      if (v < 0) wl::die("parse: unknown variable");
      return make_var(v);
    }
    if (peek() == "-") {
      next();
      Vec<ExprPtr> kids;
      kids.push_back(expr());
      expect(")");
      return make_node(Op::Neg, std::move(kids));
    }
    Vec<ExprPtr> kids;
    kids.push_back(expr());
    if (peek() == "^") {
      next();
      int64_t exponent = std::atoll(next().c_str());
      expect(")");
      return make_node(Op::Pow, std::move(kids), exponent);
    }
    Str sep = peek();
    if (sep != "+" && sep != "*") wl::die("parse: expected an operator");
    while (peek() == sep) {
      next();
      kids.push_back(expr());
    }
    expect(")");
    return make_node(sep == "+" ? Op::Add : Op::Mul, std::move(kids));
  }

 private:
  const Str& peek() const {
    if (pos_ >= t_.size()) wl::die("parse: unexpected end");
    return t_[pos_];
  }
  const Str& next() {
    const Str& tok = peek();
    ++pos_;
    return tok;
  }
  void expect(const char* tok) {
    if (next() != tok) wl::die("parse: unexpected token");
  }

  const Vec<Str>& t_;
  size_t pos_ = 0;
};

}  // namespace

ExprPtr parse(const Str& text) {
  Vec<Str> tokens = tokenize(text);
  return Parser(tokens).expr();
}

}  // namespace sym
