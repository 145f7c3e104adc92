/* ahwc: ibv_init_ah_from_wc and ibv_create_ah_from_wc on softrdma's RoCE
 * device (argv[1] is its IPv4 address) with GRH areas made by hand: what
 * rdma-core v44's libibverbs (verbs.c, ibv_init_ah_from_wc) makes of each.
 * One line per check ("ok NAME" or "BAD NAME: got X want Y"); exit 1 if any
 * is bad. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>

static int bad;

static void check(const char *name, long got, long want)
{
	if (got == want)
		printf("ok %s\n", name);
	else {
		printf("BAD %s: got %ld want %ld\n", name, got, want);
		bad++;
	}
}

/* ipv4 writes an IPv4 header (IHL 5, UDP) from src to dst into the last 20
 * bytes of the GRH area g, with its checksum, as rxe leaves it. */
static void ipv4(uint8_t *g, const char *src, const char *dst, uint8_t tos, uint8_t ttl)
{
	uint8_t *h = g + 20;
	memset(h, 0, 20);
	h[0] = 0x45;
	h[1] = tos;
	h[8] = ttl;
	h[9] = IPPROTO_UDP;
	inet_pton(AF_INET, src, h + 12);
	inet_pton(AF_INET, dst, h + 16);
	uint32_t s = 0;
	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	h[10] = (uint8_t)(~s >> 8);
	h[11] = (uint8_t)~s;
}

static int mapped(const uint8_t *gid, const char *v4)
{
	uint8_t want[16] = {[10] = 0xff, [11] = 0xff};
	inet_pton(AF_INET, v4, want + 12);
	return memcmp(gid, want, 16) == 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: ahwc DEVICE-IPV4\n");
		return 2;
	}
	const char *me = argv[1];
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		printf("BAD setup: %s\n", strerror(errno));
		return 1;
	}
	union ibv_gid g1;
	check("GID 1 is the device's IPv4-mapped address", !ibv_query_gid(ctx, 1, 1, &g1) && mapped(g1.raw, me), 1);

	uint8_t area[40];
	struct ibv_grh *grh = (struct ibv_grh *)area;
	struct ibv_wc wc = {.wc_flags = IBV_WC_GRH, .sl = 3, .src_qp = 0x11};
	struct ibv_ah_attr a;

	/* RoCEv2 over IPv4: the first 20 bytes untouched (zero). */
	memset(area, 0, sizeof(area));
	ipv4(area, "10.9.8.7", me, 0x20, 61);
	check("ipv4: 0", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), 0);
	check("ipv4: is_global", a.is_global, 1);
	check("ipv4: dgid is the sender's mapped address", mapped(a.grh.dgid.raw, "10.9.8.7"), 1);
	check("ipv4: sgid_index is the receiver's GID", a.grh.sgid_index, 1);
	check("ipv4: hop_limit is the TTL", a.grh.hop_limit, 61);
	check("ipv4: traffic_class is the TOS", a.grh.traffic_class, 0x20);
	check("ipv4: sl", a.sl, 3);
	check("ipv4: port_num", a.port_num, 1);

	/* The first 20 bytes look like IPv6 (stale data), the IPv4 header's
	 * checksum is right: IPv4 wins. */
	memset(area, 0, sizeof(area));
	area[0] = 0x60;
	ipv4(area, "10.9.8.6", me, 0, 64);
	check("ipv4 behind a stale 6 nibble: 0", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), 0);
	check("ipv4 behind a stale 6 nibble: dgid", mapped(a.grh.dgid.raw, "10.9.8.6"), 1);

	/* IPv6 GRH (RoCEv2: next header UDP) to the device's mapped GID. */
	memset(area, 0, sizeof(area));
	grh->version_tclass_flow = htonl(6u << 28 | 0x48u << 20 | 0x12345);
	grh->next_hdr = IPPROTO_UDP;
	grh->hop_limit = 33;
	memcpy(grh->dgid.raw, g1.raw, 16);
	memset(grh->sgid.raw, 0xab, 16);
	check("ipv6: 0", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), 0);
	check("ipv6: dgid is the GRH's sgid", a.grh.dgid.raw[0] == 0xab && a.grh.dgid.raw[15] == 0xab, 1);
	check("ipv6: sgid_index", a.grh.sgid_index, 1);
	check("ipv6: hop_limit", a.grh.hop_limit, 33);
	check("ipv6: traffic_class", a.grh.traffic_class, 0x48);
	check("ipv6: flow_label", a.grh.flow_label, 0x12345);

	/* IPv6 with a next header that is neither UDP nor IB (0x1b). */
	grh->next_hdr = IPPROTO_TCP;
	errno = 0;
	check("ipv6 next header TCP: -1", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), -1);
	check("ipv6 next header TCP: EPROTONOSUPPORT", errno, EPROTONOSUPPORT);

	/* IPv6 multicast destination. */
	grh->next_hdr = IPPROTO_UDP;
	grh->dgid.raw[0] = 0xff;
	errno = 0;
	check("ipv6 multicast: -1", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), -1);
	check("ipv6 multicast: EINVAL", errno, EINVAL);

	/* IPv4 multicast destination. */
	memset(area, 0, sizeof(area));
	ipv4(area, "10.9.8.7", "239.1.1.1", 0, 64);
	errno = 0;
	check("ipv4 multicast: -1", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), -1);
	check("ipv4 multicast: EINVAL", errno, EINVAL);

	/* IPv4 to an address that is not the device's. */
	ipv4(area, "10.9.8.7", "10.200.200.200", 0, 64);
	check("ipv4 to another address: -1", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), -1);

	/* Neither version. */
	memset(area, 0, sizeof(area));
	errno = 0;
	check("no IP header: -1", ibv_init_ah_from_wc(ctx, 1, &wc, grh, &a), -1);
	check("no IP header: EPROTONOSUPPORT", errno, EPROTONOSUPPORT);

	/* No IBV_WC_GRH: the attributes without a GRH, GRH area ignored. */
	struct ibv_wc nog = {.sl = 2};
	check("no GRH flag: 0", ibv_init_ah_from_wc(ctx, 1, &nog, grh, &a), 0);
	check("no GRH flag: is_global 0", a.is_global, 0);
	check("no GRH flag: sl", a.sl, 2);

	/* ibv_create_ah_from_wc makes an AH from the IPv4 case; without a GRH
	 * RoCE has no address (ibv_create_ah refuses it, as rxe). */
	memset(area, 0, sizeof(area));
	ipv4(area, "10.9.8.7", me, 0, 64);
	struct ibv_ah *ah = ibv_create_ah_from_wc(pd, &wc, grh, 1);
	check("create_ah_from_wc ipv4: an AH", ah != NULL, 1);
	if (ah)
		check("destroy_ah", ibv_destroy_ah(ah), 0);
	check("create_ah_from_wc without a GRH: NULL", ibv_create_ah_from_wc(pd, &nog, grh, 1) == NULL, 1);

	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	printf("checks done, bad: %d\n", bad);
	return bad ? 1 : 0;
}
