package main

// C helpers for refusing bad calls: sr_debug says why a verb was refused when
// SOFTRDMA_DEBUG is set, as the Go side's debugf does, for the checks made
// before a call reaches Go. Definitions live here, in a file without //export.

/*
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void sr_debug(const char *format, ...)
{
	static int on = -1;
	if (on < 0) {
		const char *v = getenv("SOFTRDMA_DEBUG");
		on = v && *v;
	}
	if (!on)
		return;
	va_list ap;
	va_start(ap, format);
	fputs("softrdma: ", stderr);
	vfprintf(stderr, format, ap);
	fputc('\n', stderr);
	va_end(ap);
}
*/
import "C"
