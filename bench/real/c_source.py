"""Generates the C translation unit the real_gcc workload compiles: many
small functions over a few struct types, with loops, switches and calls
between them, so that the compiler builds and optimises many trees, RTL
insns and hash tables (cc1's own allocations) as for ordinary code. The text
depends only on the number of functions, so every allocator compiles the
very same input."""
import random

FUNCTIONS = 60  # at scale 1

_STRUCTS = """\
struct point { int x, y, z; double w; };
struct node { struct node *next; int key; char name[24]; struct point at; };
struct table { struct node *buckets[64]; unsigned count; };
"""

_OPS = ["+", "-", "*", "^", "|", "&"]


def _function(rng, i):
    op1, op2 = rng.choice(_OPS), rng.choice(_OPS)
    cases = "\n".join(f"    case {c}: acc = acc {rng.choice(_OPS)} {rng.randint(1, 999)}; break;"
                      for c in range(rng.randint(3, 12)))
    calls = "".join(f"\n  acc += f{j}(t, n - 1, (struct point){{acc, {j}, n, 0.5}});"
                    for j in sorted(rng.sample(range(i), min(i, rng.randint(0, 3)))))
    return f"""\
static int f{i}(struct table *t, int n, struct point p) {{
  int acc = p.x {op1} {rng.randint(1, 99)};
  if (n <= 0) return acc;
  for (int k = 0; k < n; ++k) {{
    struct node *e = t->buckets[(k * {rng.randint(3, 61)}) & 63];
    while (e) {{
      acc = acc {op2} (e->key + e->at.y);
      if (e->name[k & 15] == '{chr(97 + i % 26)}') acc ^= (int)(p.w * {rng.randint(2, 9)});
      e = e->next;
    }}
    switch ((acc + k) & 15) {{
{cases}
    default: acc += k;
    }}
  }}{calls}
  return acc;
}}
"""


def generate(scale):
    rng = random.Random(3)
    n = max(2, int(FUNCTIONS * scale))
    parts = [_STRUCTS] + [_function(rng, i) for i in range(n)]
    parts.append("int run(struct table *t) {\n  int acc = 0;\n"
                 + "".join(f"  acc += f{i}(t, {i % 5}, (struct point){{{i}, 0, 0, 1.0}});\n" for i in range(n))
                 + "  return acc;\n}\n")
    return "\n".join(parts)
