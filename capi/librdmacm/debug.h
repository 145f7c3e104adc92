/* sr_debug writes "softrdma: MESSAGE" to stderr when SOFTRDMA_DEBUG is set:
 * why a call was refused or a connection given up. Defined in rdmacm.c and
 * shared with rsocket.c; hidden, like everything the version script does not
 * export. */
#ifndef SOFTRDMA_LIBRDMACM_DEBUG_H
#define SOFTRDMA_LIBRDMACM_DEBUG_H

void sr_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2), visibility("hidden")));

#endif
