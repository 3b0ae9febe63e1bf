/* The buggy program of Figure 8 of the Vmalloc paper through vmalloc.h:
 * its malloc and free are vmalloc and vmfree on a region `figure8_vm`, and
 * the #line below gives its lines the paper's numbers and its file the
 * paper's name (t.c), so that Vmdebug's reports read as Figure 9's. It
 * allocates one byte too few on line 4 (strcpy writes the terminator past
 * the end), frees a string literal on line 6, and frees on line 19 what
 * line 12 freed. Built with VMFL: each call records its file and line. */
#include <string.h>
#define VMFL 1
#include "client/vmalloc.h"
Vmalloc_t* figure8_vm;
#define vm figure8_vm
#line 2 "t.c"
void foo(
char* s)
{    char* news = vmalloc(vm,strlen(s));
     strcpy(news,s);
     vmfree(vm,s);
}
char* bar(
char* s)
{    char* news = vmalloc(vm,strlen(s)+1);
     strcpy(news,s);
     vmfree(vm,news);
     return news;
}
void figure8(void)
{    char* s = "1234";
     foo(s);
     s = bar(s);
     vmfree(vm,s);
}
