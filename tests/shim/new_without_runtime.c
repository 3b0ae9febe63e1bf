/* A C program, with no C++ runtime loaded, that calls operator new through
 * the symbol the malloc shim exports: once with a size that succeeds, then
 * with one that cannot. The shim looks for the program's runtime to throw
 * std::bad_alloc, finds none, and must say so and abort (not crash, not
 * return null from a new that may not return null). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void* (*new_fn)(unsigned long);
typedef void (*delete_fn)(void*);

int main(void) {
  new_fn op_new = (new_fn)dlsym(RTLD_DEFAULT, "_Znwm");
  delete_fn op_delete = (delete_fn)dlsym(RTLD_DEFAULT, "_ZdlPv");
  if (op_new == NULL || op_delete == NULL) {
    puts("no operator new in this process");
    return 2;
  }
  char* p = op_new(64);
  memset(p, 7, 64);
  printf("new(64) gave an object: %d\n", p[63]);
  op_delete(p);
  fflush(stdout);
  void* q = op_new((unsigned long)-1 / 2);
  printf("new of half the address space returned %p\n", q);
  return 1;
}
