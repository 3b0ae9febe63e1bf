// wl_symbolic: an allocation-heavy symbolic-algebra workload (in the spirit
// of espresso, cfrac and gs): random expression trees are printed to text,
// parsed back, simplified by term rewriting, differentiated and expanded
// into polynomials keyed by small vectors, with a bounded memo of results
// (std::map of std::string) as medium-lived data. Single-threaded.
//
// It checks itself as it goes (print/parse round trip, expand(e) ==
// expand(simplify(e))), so a heap that corrupts memory fails loudly.
#include "symbolic/expr.h"
#include "symbolic/poly.h"

namespace {

constexpr uint64_t kIterations = 27'000;  // at scale 1
constexpr size_t kMemoCapacity = 4096;

uint64_t hash_text(uint64_t h, const sym::Str& s) {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return wl::mix(h, s.size());
}

// Remembers recent results; the oldest entry is evicted first, so entries
// live for a few thousand iterations — neither immortal nor temporary.
class Memo {
 public:
  void remember(sym::Str key, sym::Str value) {
    if (order_.size() < kMemoCapacity) {
      order_.push_back(key);
    } else {
      map_.erase(order_[next_]);
      order_[next_] = key;
      next_ = (next_ + 1) % kMemoCapacity;
    }
    map_.insert_or_assign(std::move(key), std::move(value));
  }
  size_t size() const { return map_.size(); }

 private:
  sym::Map<sym::Str, sym::Str> map_;
  sym::Vec<sym::Str> order_;
  size_t next_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  wl::Args args = wl::parse_args(argc, argv, 1, false);
  uint64_t iterations = wl::scaled(kIterations, args.scale);

  wl::Rng rng(12345);
  uint64_t h = 0;
  {
    Memo memo;
    for (uint64_t i = 0; i < iterations; ++i) {
      sym::ExprPtr e = sym::random_expr(rng, 0);
      sym::Str text = sym::print(*e);
      sym::ExprPtr reparsed = sym::parse(text);
      if (sym::print(*reparsed) != text) wl::die("print/parse round trip differs");

      sym::ExprPtr simple = sym::simplify(*reparsed);
      sym::Poly poly = sym::expand(*simple);
      if (poly != sym::expand(*e)) wl::die("simplify changed the expression's value");

      int var = static_cast<int>(rng.below(sym::kVars));
      sym::ExprPtr slope = sym::simplify(*sym::derive(*simple, var));
      sym::Str result = sym::to_string(poly) + " ; d/d" + sym::variable_name(var) + " = " +
                        sym::to_string(sym::expand(*slope));

      h = hash_text(h, sym::print(*simple));
      h = hash_text(h, result);
      memo.remember(std::move(text), std::move(result));
    }
    h = wl::mix(h, memo.size());
  }
  wl::report(h, sym::live_bytes().peak());
  return 0;
}
