/* A small, strict JSON reader and writer for conform-ctl's control protocol
 * (conform/CONTROL.md): one object per line, flat arguments. The reader takes
 * untrusted input: every length is checked, nesting is bounded, and every
 * failure is an error message, never a crash. */
#ifndef CONFORMCTL_JSON_H
#define CONFORMCTL_JSON_H

#include <stddef.h>
#include <stdint.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	int b;            /* J_BOOL */
	/* J_NUM: is_uint says the number is an integer in [0, 2^64) held exactly
	 * in u; neg says it is below zero; num is its value as a double. */
	int is_uint, neg;
	uint64_t u;
	double num;
	char *str;        /* J_STR: the decoded bytes (NUL-terminated; may hold NULs) */
	size_t len;       /* J_STR: length; J_ARR, J_OBJ: number of members */
	struct jval *kids; /* J_ARR, J_OBJ: the members */
	char **keys;      /* J_OBJ: the member names */
	size_t *keylens;
};

/* json_parse parses text[0:n] as exactly one JSON value (white space around
 * it allowed). It returns the value, or NULL with err (of errlen bytes) saying
 * what is wrong and where. */
struct jval *json_parse(const char *text, size_t n, char *err, size_t errlen);
void json_free(struct jval *v);

/* json_get returns the last member named key of object o (as Go's
 * encoding/json, which keeps the last of repeated names), or NULL. */
const struct jval *json_get(const struct jval *o, const char *key);

/* A growing output buffer. On allocation failure it sets oom and drops what
 * follows; the caller checks oom before sending. */
struct jbuf {
	char *p;
	size_t len, cap;
	int oom;
};

void jb_raw(struct jbuf *b, const char *s, size_t n);
void jb_str(struct jbuf *b, const char *s);          /* a C string, as a JSON string */
void jb_strn(struct jbuf *b, const char *s, size_t n);
void jb_printf(struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jb_base64(struct jbuf *b, const unsigned char *p, size_t n); /* as a JSON string */
void jb_free(struct jbuf *b);

/* base64_decode decodes standard, padded base64 (Go's []byte in JSON) from
 * s[0:n] into a new buffer of *outlen bytes; NULL if it is not base64. */
unsigned char *base64_decode(const char *s, size_t n, size_t *outlen);

#endif
