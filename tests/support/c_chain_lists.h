/* For the C API tests of call-chain pools: two linked lists built at once
 * from two call sites, one node of each in turn, and how much of each lies
 * node after node in memory. With pools, each site's nodes come from blocks
 * of their own (nearly every link is one object size long); without, the
 * two lists interleave (hardly any is). */
#ifndef MEMD_TESTS_SUPPORT_C_CHAIN_LISTS_H_
#define MEMD_TESTS_SUPPORT_C_CHAIN_LISTS_H_

#include <stddef.h>
#include <stdint.h>

struct chain_node {
  struct chain_node* next;
  uint64_t payload[5];
}; /* 48 bytes: a size class of its own, so the stride is the size */

typedef void* (*chain_alloc_fn)(void* owner, size_t size);
typedef void (*chain_free_fn)(void* owner, void* p);

/* Two sites of their own: each call is a return address of its own. */
static __attribute__((noinline)) struct chain_node* chain_node_a(chain_alloc_fn alloc, void* owner) {
  return (struct chain_node*)alloc(owner, sizeof(struct chain_node));
}
static __attribute__((noinline)) struct chain_node* chain_node_b(chain_alloc_fn alloc, void* owner) {
  return (struct chain_node*)alloc(owner, sizeof(struct chain_node));
}

/* Builds both lists of `n` nodes, checks every node's payload, frees them;
 * the share of list a's links that go to the very next object of its
 * size, or -1 if a node was lost or damaged. */
static double chain_lists_adjacency(chain_alloc_fn alloc, chain_free_fn release, void* owner, int n) {
  struct chain_node *a = NULL, *b = NULL, **a_end = &a, **b_end = &b;
  for (int i = 0; i < n; ++i) {
    struct chain_node* x = chain_node_a(alloc, owner);
    struct chain_node* y = chain_node_b(alloc, owner);
    if (x == NULL || y == NULL) return -1;
    x->next = y->next = NULL;
    for (int k = 0; k < 5; ++k) {
      x->payload[k] = (uint64_t)i * 2;
      y->payload[k] = (uint64_t)i * 2 + 1;
    }
    *a_end = x;
    a_end = &x->next;
    *b_end = y;
    b_end = &y->next;
  }
  int adjacent = 0, links = 0, i = 0;
  double result = 0;
  for (struct chain_node* x = a; x != NULL; x = x->next, ++i) {
    if (x->payload[0] != (uint64_t)i * 2 || x->payload[4] != (uint64_t)i * 2) result = -1;
    if (x->next != NULL) {
      ++links;
      adjacent += (uintptr_t)x->next - (uintptr_t)x == sizeof(struct chain_node);
    }
  }
  if (i != n) result = -1;
  i = 0;
  for (struct chain_node* y = b; y != NULL; y = y->next, ++i) {
    if (y->payload[0] != (uint64_t)i * 2 + 1) result = -1;
  }
  if (i != n) result = -1;
  while (a != NULL) {
    struct chain_node* next = a->next;
    release(owner, a);
    a = next;
  }
  while (b != NULL) {
    struct chain_node* next = b->next;
    release(owner, b);
    b = next;
  }
  return result < 0 ? -1 : (double)adjacent / links;
}

#endif
