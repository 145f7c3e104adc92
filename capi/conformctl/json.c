/* JSON reader and writer of conform-ctl (json.h). */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on what one request may make the reader build. */
#define MAX_DEPTH 32
#define MAX_MEMBERS 4096

struct parser {
	const char *s;
	size_t n, i;
	char *err;
	size_t errlen;
	int depth;
};

static void perr(struct parser *p, const char *what)
{
	if (p->err[0] == 0)
		snprintf(p->err, p->errlen, "%s at offset %zu", what, p->i);
}

static void skip_ws(struct parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

static void free_members(struct jval *v)
{
	size_t k;

	if (v->type == J_ARR || v->type == J_OBJ) {
		for (k = 0; k < v->len; k++) {
			free_members(&v->kids[k]);
			if (v->keys)
				free(v->keys[k]);
		}
		free(v->kids);
		free(v->keys);
		free(v->keylens);
	}
	if (v->type == J_STR)
		free(v->str);
}

void json_free(struct jval *v)
{
	if (!v)
		return;
	free_members(v);
	free(v);
}

static int parse_value(struct parser *p, struct jval *v);

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int read_hex4(struct parser *p, unsigned *out)
{
	unsigned u = 0;
	int k, h;

	if (p->n - p->i < 4) {
		perr(p, "short \\u escape");
		return -1;
	}
	for (k = 0; k < 4; k++) {
		h = hexval(p->s[p->i + k]);
		if (h < 0) {
			perr(p, "bad \\u escape");
			return -1;
		}
		u = u << 4 | (unsigned)h;
	}
	p->i += 4;
	*out = u;
	return 0;
}

static size_t put_utf8(char *d, unsigned c)
{
	if (c < 0x80) {
		d[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		d[0] = (char)(0xc0 | c >> 6);
		d[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		d[0] = (char)(0xe0 | c >> 12);
		d[1] = (char)(0x80 | (c >> 6 & 0x3f));
		d[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	d[0] = (char)(0xf0 | c >> 18);
	d[1] = (char)(0x80 | (c >> 12 & 0x3f));
	d[2] = (char)(0x80 | (c >> 6 & 0x3f));
	d[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* parse_string reads a string at p->i (at its opening quote) into a new buffer. */
static int parse_string(struct parser *p, char **out, size_t *outlen)
{
	size_t start, cap, len = 0;
	char *d;

	p->i++; /* the quote */
	start = p->i;
	/* The decoded string is never longer than its source text. */
	while (p->i < p->n && p->s[p->i] != '"') {
		if (p->s[p->i] == '\\')
			p->i++;
		p->i++;
	}
	if (p->i >= p->n) {
		perr(p, "unterminated string");
		return -1;
	}
	cap = p->i - start + 1;
	d = malloc(cap);
	if (!d) {
		perr(p, "out of memory");
		return -1;
	}
	p->i = start;
	while (p->s[p->i] != '"') {
		unsigned char c = (unsigned char)p->s[p->i];
		unsigned u, lo;

		if (c < 0x20) {
			perr(p, "control character in string");
			goto bad;
		}
		if (c != '\\') {
			d[len++] = (char)c;
			p->i++;
			continue;
		}
		p->i++;
		c = (unsigned char)p->s[p->i++];
		switch (c) {
		case '"': d[len++] = '"'; break;
		case '\\': d[len++] = '\\'; break;
		case '/': d[len++] = '/'; break;
		case 'b': d[len++] = '\b'; break;
		case 'f': d[len++] = '\f'; break;
		case 'n': d[len++] = '\n'; break;
		case 'r': d[len++] = '\r'; break;
		case 't': d[len++] = '\t'; break;
		case 'u':
			if (read_hex4(p, &u))
				goto bad;
			if (u >= 0xd800 && u < 0xdc00 && p->n - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
				size_t save = p->i;

				p->i += 2;
				if (read_hex4(p, &lo))
					goto bad;
				if (lo >= 0xdc00 && lo < 0xe000)
					u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
				else
					p->i = save;
			}
			if (u >= 0xd800 && u < 0xe000)
				u = 0xfffd; /* a lone surrogate, as Go decodes it */
			/* 6 source bytes (\uXXXX) give at most 3 UTF-8 bytes, 12 give 4. */
			len += put_utf8(d + len, u);
			break;
		default:
			p->i--;
			perr(p, "bad escape in string");
			goto bad;
		}
	}
	p->i++; /* the closing quote */
	d[len] = 0;
	*out = d;
	*outlen = len;
	return 0;
bad:
	free(d);
	return -1;
}

static int parse_number(struct parser *p, struct jval *v)
{
	size_t start = p->i;
	int digits = 0, frac = 0;
	uint64_t u = 0;
	int overflow = 0;
	char buf[64];

	v->type = J_NUM;
	if (p->i < p->n && p->s[p->i] == '-') {
		v->neg = 1;
		p->i++;
	}
	if (p->i < p->n && p->s[p->i] == '0') {
		p->i++;
		digits = 1;
	} else {
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
			unsigned d = (unsigned)(p->s[p->i] - '0');

			if (u > (UINT64_MAX - d) / 10)
				overflow = 1;
			else
				u = u * 10 + d;
			p->i++;
			digits++;
		}
	}
	if (!digits) {
		perr(p, "bad number");
		return -1;
	}
	if (p->i < p->n && p->s[p->i] == '.') {
		p->i++;
		frac = 1;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') {
			perr(p, "bad number");
			return -1;
		}
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		p->i++;
		frac = 1;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') {
			perr(p, "bad number");
			return -1;
		}
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
			p->i++;
	}
	if (p->i - start < sizeof buf) {
		memcpy(buf, p->s + start, p->i - start);
		buf[p->i - start] = 0;
		v->num = strtod(buf, NULL);
	} else {
		v->num = v->neg ? -1e300 : 1e300;
	}
	/* An integer, exactly, as Go decodes into an unsigned field: no
	 * fraction, no exponent, no sign (-0 is 0). */
	v->is_uint = !frac && !overflow && (!v->neg || u == 0);
	v->u = u;
	return 0;
}

static int expect_word(struct parser *p, const char *w)
{
	size_t l = strlen(w);

	if (p->n - p->i < l || memcmp(p->s + p->i, w, l) != 0) {
		perr(p, "invalid character");
		return -1;
	}
	p->i += l;
	return 0;
}

/* grow makes room for one more member of v (an array or object). */
static int grow(struct parser *p, struct jval *v, size_t *cap)
{
	if (v->len < *cap)
		return 0;
	if (v->len >= MAX_MEMBERS) {
		perr(p, "too many members");
		return -1;
	}
	size_t nc = *cap ? *cap * 2 : 4;
	struct jval *k = realloc(v->kids, nc * sizeof *k);
	if (!k)
		goto oom;
	v->kids = k;
	if (v->type == J_OBJ) {
		char **ks = realloc(v->keys, nc * sizeof *ks);
		if (!ks)
			goto oom;
		v->keys = ks;
		size_t *kl = realloc(v->keylens, nc * sizeof *kl);
		if (!kl)
			goto oom;
		v->keylens = kl;
	}
	*cap = nc;
	return 0;
oom:
	perr(p, "out of memory");
	return -1;
}

static int parse_container(struct parser *p, struct jval *v, char close)
{
	size_t cap = 0;

	if (++p->depth > MAX_DEPTH) {
		perr(p, "nested too deeply");
		return -1;
	}
	p->i++; /* [ or { */
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		p->depth--;
		return 0;
	}
	for (;;) {
		char *key = NULL;
		size_t keylen = 0;

		skip_ws(p);
		if (v->type == J_OBJ) {
			if (p->i >= p->n || p->s[p->i] != '"') {
				perr(p, "want a member name");
				return -1;
			}
			if (parse_string(p, &key, &keylen))
				return -1;
			skip_ws(p);
			if (p->i >= p->n || p->s[p->i] != ':') {
				free(key);
				perr(p, "want ':'");
				return -1;
			}
			p->i++;
		}
		if (grow(p, v, &cap)) {
			free(key);
			return -1;
		}
		memset(&v->kids[v->len], 0, sizeof v->kids[0]);
		if (v->type == J_OBJ) {
			v->keys[v->len] = key;
			v->keylens[v->len] = keylen;
		}
		v->len++;
		if (parse_value(p, &v->kids[v->len - 1]))
			return -1;
		skip_ws(p);
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->i < p->n && p->s[p->i] == close) {
			p->i++;
			p->depth--;
			return 0;
		}
		perr(p, v->type == J_OBJ ? "want ',' or '}'" : "want ',' or ']'");
		return -1;
	}
}

static int parse_value(struct parser *p, struct jval *v)
{
	skip_ws(p);
	if (p->i >= p->n) {
		perr(p, "unexpected end of input");
		return -1;
	}
	switch (p->s[p->i]) {
	case '{':
		v->type = J_OBJ;
		return parse_container(p, v, '}');
	case '[':
		v->type = J_ARR;
		return parse_container(p, v, ']');
	case '"':
		if (parse_string(p, &v->str, &v->len))
			return -1;
		v->type = J_STR;
		return 0;
	case 't':
		v->type = J_BOOL;
		v->b = 1;
		return expect_word(p, "true");
	case 'f':
		v->type = J_BOOL;
		return expect_word(p, "false");
	case 'n':
		v->type = J_NULL;
		return expect_word(p, "null");
	}
	if (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9'))
		return parse_number(p, v);
	perr(p, "invalid character");
	return -1;
}

struct jval *json_parse(const char *text, size_t n, char *err, size_t errlen)
{
	struct parser p = { .s = text, .n = n, .err = err, .errlen = errlen };
	struct jval *v = calloc(1, sizeof *v);

	err[0] = 0;
	if (!v) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (parse_value(&p, v) == 0) {
		skip_ws(&p);
		if (p.i == n)
			return v;
		perr(&p, "invalid character after the value");
	}
	json_free(v);
	return NULL;
}

const struct jval *json_get(const struct jval *o, const char *key)
{
	size_t k, l = strlen(key);
	const struct jval *found = NULL;

	if (!o || o->type != J_OBJ)
		return NULL;
	for (k = 0; k < o->len; k++)
		if (o->keylens[k] == l && memcmp(o->keys[k], key, l) == 0)
			found = &o->kids[k];
	return found;
}

/* The writer. */

static int jb_reserve(struct jbuf *b, size_t n)
{
	if (b->oom)
		return -1;
	if (b->cap - b->len > n)
		return 0;
	size_t nc = b->cap ? b->cap : 256;
	while (nc - b->len <= n) {
		if (nc > SIZE_MAX / 2) {
			b->oom = 1;
			return -1;
		}
		nc *= 2;
	}
	char *p = realloc(b->p, nc);
	if (!p) {
		b->oom = 1;
		return -1;
	}
	b->p = p;
	b->cap = nc;
	return 0;
}

void jb_raw(struct jbuf *b, const char *s, size_t n)
{
	if (jb_reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void jb_strn(struct jbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t k;

	jb_raw(b, "\"", 1);
	for (k = 0; k < n; k++) {
		unsigned char c = (unsigned char)s[k];
		char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };

		if (c == '"' || c == '\\') {
			char q[2] = { '\\', (char)c };
			jb_raw(b, q, 2);
		} else if (c < 0x20 || c == 0x7f) {
			jb_raw(b, e, 6);
		} else if (c >= 0x80) {
			/* Not ours to vouch for as UTF-8 (an error may quote
			 * what the client sent): escape it as its code point. */
			jb_raw(b, "\\u00", 4);
			jb_raw(b, &e[4], 2);
		} else {
			jb_raw(b, (const char *)&c, 1);
		}
	}
	jb_raw(b, "\"", 1);
}

void jb_str(struct jbuf *b, const char *s)
{
	jb_strn(b, s, strlen(s));
}

void jb_printf(struct jbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || jb_reserve(b, (size_t)n + 1))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void jb_base64(struct jbuf *b, const unsigned char *p, size_t n)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t k, o;

	if (jb_reserve(b, (n + 2) / 3 * 4 + 2))
		return;
	b->p[b->len++] = '"';
	for (k = 0, o = b->len; k + 2 < n; k += 3) {
		uint32_t w = (uint32_t)p[k] << 16 | (uint32_t)p[k + 1] << 8 | p[k + 2];
		b->p[o++] = a[w >> 18];
		b->p[o++] = a[w >> 12 & 63];
		b->p[o++] = a[w >> 6 & 63];
		b->p[o++] = a[w & 63];
	}
	if (n - k == 1) {
		uint32_t w = (uint32_t)p[k] << 16;
		b->p[o++] = a[w >> 18];
		b->p[o++] = a[w >> 12 & 63];
		b->p[o++] = '=';
		b->p[o++] = '=';
	} else if (n - k == 2) {
		uint32_t w = (uint32_t)p[k] << 16 | (uint32_t)p[k + 1] << 8;
		b->p[o++] = a[w >> 18];
		b->p[o++] = a[w >> 12 & 63];
		b->p[o++] = a[w >> 6 & 63];
		b->p[o++] = '=';
	}
	b->p[o++] = '"';
	b->p[o] = 0;
	b->len = o;
}

void jb_free(struct jbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

static int b64val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

unsigned char *base64_decode(const char *s, size_t n, size_t *outlen)
{
	unsigned char *out = malloc(n / 4 * 3 + 3);
	unsigned char q[4];
	size_t k, nq = 0, o = 0;
	int pad = 0;

	if (!out)
		return NULL;
	for (k = 0; k < n; k++) {
		unsigned char c = (unsigned char)s[k];
		int v;

		if (c == '\r' || c == '\n') /* Go's StdEncoding skips them */
			continue;
		if (c == '=') {
			/* Padding: only at the end of the last quantum. */
			if (nq < 2)
				goto bad;
			pad++;
			q[nq++] = 0;
			if (nq == 4) {
				out[o++] = (unsigned char)(q[0] << 2 | q[1] >> 4);
				if (pad == 1)
					out[o++] = (unsigned char)(q[1] << 4 | q[2] >> 2);
				nq = 0;
				for (k++; k < n; k++)
					if (s[k] != '\r' && s[k] != '\n')
						goto bad;
				break;
			}
			continue;
		}
		if (pad || (v = b64val(c)) < 0)
			goto bad;
		q[nq++] = (unsigned char)v;
		if (nq == 4) {
			out[o++] = (unsigned char)(q[0] << 2 | q[1] >> 4);
			out[o++] = (unsigned char)(q[1] << 4 | q[2] >> 2);
			out[o++] = (unsigned char)(q[2] << 6 | q[3]);
			nq = 0;
		}
	}
	if (nq != 0)
		goto bad;
	*outlen = o;
	return out;
bad:
	free(out);
	return NULL;
}
