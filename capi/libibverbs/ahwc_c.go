package main

// ibv_init_ah_from_wc and ibv_create_ah_from_wc: the address handle that
// answers a UD message, built from its completion and the 40-byte GRH area at
// the start of its receive buffer (udaddy's server replies this way).
//
// What the GRH area holds on RoCEv2 (as rxe fills it, and roce.Device's
// deliver): for IPv6 the IPv6 header; for IPv4 the IPv4 header in its last
// 20 bytes, the first 20 left as they were. libibverbs (rdma-core v44
// verbs.c) tells them apart by the IP version nibble of byte 0 (6: IPv6, but
// an IPv4 header with IHL 5 and a valid checksum at byte 20 wins, since an
// untouched buffer can hold anything) or of byte 20 (4). The reply's
// destination GID is the sender's address (IPv4-mapped for IPv4), its source
// GID index the local GID the message was sent to (RoCEv2 type), its hop
// limit and traffic class the received ones. Without IBV_WC_GRH the AH has
// no GRH, which RoCE cannot use (ibv_create_ah refuses it, as rxe's).

/*
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

extern void sr_debug(const char *format, ...);
// driver.h's, defined in verbs_c.go.
extern int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type);

// sr_ipv4_sum is the IPv4 header checksum of the 20 bytes at h, with the
// checksum field counted as stored: 0 when the header is intact.
static uint16_t sr_ipv4_sum(const uint8_t *h)
{
	uint32_t s = 0;
	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

// sr_grh_ip_version returns 4 or 6, the IP version of the header in the GRH
// area g, or -1 (errno EPROTONOSUPPORT) when it holds neither.
static int sr_grh_ip_version(const uint8_t *g)
{
	const uint8_t *v4 = g + 20;
	int v4ok = (v4[0] >> 4) == 4 && (v4[0] & 0xf) == 5;
	if ((g[0] >> 4) == 6)
		return v4ok && sr_ipv4_sum(v4) == 0 ? 4 : 6;
	if ((v4[0] >> 4) == 4)
		return 4;
	errno = EPROTONOSUPPORT;
	return -1;
}

// sr_find_gid returns the index of gid in port's GID table, RoCEv2 type when
// v2, else -1 with errno set.
static int sr_find_gid(struct ibv_context *ctx, uint8_t port, const uint8_t *gid, int v2)
{
	for (int i = 0;; i++) {
		union ibv_gid g;
		int type;
		if (ibv_query_gid(ctx, port, i, &g) || ibv_query_gid_type(ctx, port, i, &type))
			break;
		if (memcmp(g.raw, gid, 16) == 0 && (type == 1) == v2)
			return i;
	}
	char s[INET6_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET6, gid, s, sizeof(s));
	sr_debug("ibv_init_ah_from_wc: the message's destination GID %s is not in port %u's GID table", s, port);
	errno = ENOENT;
	return -1;
}

static void sr_v4_mapped(uint8_t *gid, const uint8_t *addr)
{
	memset(gid, 0, 10);
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, addr, 4);
}

int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh,
			struct ibv_ah_attr *ah_attr)
{
	if (!ctx || !wc || !ah_attr) {
		errno = EINVAL;
		return -1;
	}
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	if (!grh) {
		sr_debug("ibv_init_ah_from_wc: IBV_WC_GRH set and no GRH buffer");
		errno = EINVAL;
		return -1;
	}
	const uint8_t *g = (const uint8_t *)grh;
	ah_attr->is_global = 1;
	ah_attr->grh.flow_label = ntohl(grh->version_tclass_flow) & 0xfffff;
	uint8_t gid[16];
	int idx;
	switch (sr_grh_ip_version(g)) {
	case 4: {
		const uint8_t *ip = g + 20;
		if ((ip[16] & 0xf0) == 0xe0) {
			sr_debug("ibv_init_ah_from_wc: multicast destination %u.%u.%u.%u", ip[16], ip[17], ip[18], ip[19]);
			errno = EINVAL;
			return -1;
		}
		sr_v4_mapped(gid, ip + 16);
		if ((idx = sr_find_gid(ctx, port_num, gid, 1)) < 0)
			return -1;
		sr_v4_mapped(ah_attr->grh.dgid.raw, ip + 12);
		ah_attr->grh.sgid_index = idx;
		ah_attr->grh.hop_limit = ip[8];
		ah_attr->grh.traffic_class = ip[1];
		return 0;
	}
	case 6: {
		if (grh->dgid.raw[0] == 0xff) {
			sr_debug("ibv_init_ah_from_wc: multicast destination GID");
			errno = EINVAL;
			return -1;
		}
		int v2;
		if (grh->next_hdr == IPPROTO_UDP)
			v2 = 1;
		else if (grh->next_hdr == 0x1b)
			v2 = 0;
		else {
			sr_debug("ibv_init_ah_from_wc: GRH next header 0x%x is neither UDP nor IB", grh->next_hdr);
			errno = EPROTONOSUPPORT;
			return -1;
		}
		if ((idx = sr_find_gid(ctx, port_num, grh->dgid.raw, v2)) < 0)
			return -1;
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.sgid_index = idx;
		ah_attr->grh.hop_limit = grh->hop_limit;
		ah_attr->grh.traffic_class = (ntohl(grh->version_tclass_flow) >> 20) & 0xff;
		return 0;
	}
	}
	sr_debug("ibv_init_ah_from_wc: the GRH area holds neither an IPv6 nor an IPv4 header");
	return -1;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port_num)
{
	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}
*/
import "C"
