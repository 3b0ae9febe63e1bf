/* The buggy program of Figure 8 of the Vmalloc paper, line for line: the
 * #line below gives its lines the paper's numbers and its file the paper's
 * name (t.c), so that the debug method's reports read as Figure 9's. It
 * allocates one byte too few on line 4 (strcpy writes the terminator past
 * the end), frees a string literal on line 6, and frees on line 19 what
 * line 12 freed. Built with VMFL (client/memd_debug.h): each allocation
 * call records its file and line. */
#include <stdlib.h>
#include <string.h>
#define VMFL 1
#include "client/memd_debug.h"
#line 2 "t.c"
void foo(
char* s)
{    char* news = malloc(strlen(s));
     strcpy(news,s);
     free(s);
}
char* bar(
char* s)
{    char* news = malloc(strlen(s)+1);
     strcpy(news,s);
     free(news);
     return news;
}
int main(void)
{    char* s = "1234";
     foo(s);
     s = bar(s);
     free(s);
}
