/* cmjoin: rdma_join_multicast on softrdma's librdmacm (argv[1] is the RoCE
 * device's IPv4 address, argv[2] an IPv4 group), with the ID's QP created
 * after the join and before its MULTICAST_JOIN event is taken: as in
 * rdma-core (ucma_process_join), taking the event attaches that QP (a detach
 * then succeeds; it is EINVAL for a QP not attached). The event carries the
 * join's context, QPN 0xFFFFFF, RDMA_UDP_QKEY and the IPv4-mapped group; a
 * leave succeeds once, then is EADDRNOTAVAIL. One line per check ("ok NAME"
 * or "BAD NAME: got X want Y"); exit 1 if any is bad. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

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

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cmjoin DEVICE-IPV4 GROUP-IPV4\n");
		return 2;
	}
	struct sockaddr_in src = {.sin_family = AF_INET}, grp = {.sin_family = AF_INET};
	inet_pton(AF_INET, argv[1], &src.sin_addr);
	inet_pton(AF_INET, argv[2], &grp.sin_addr);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev = NULL;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) ||
	    rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&grp, 2000) || rdma_get_cm_event(ch, &ev)) {
		printf("BAD setup: %s\n", strerror(errno));
		return 1;
	}
	check("ADDR_RESOLVED", ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);

	check("join", rdma_join_multicast(id, (struct sockaddr *)&grp, (void *)0x5eed), 0);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_qp_init_attr ia = {.qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	check("create the QP after the join", pd && !rdma_create_qp(id, pd, &ia), 1);

	check("the event", rdma_get_cm_event(ch, &ev), 0);
	union ibv_gid mgid = {.raw = {[10] = 0xff, [11] = 0xff}};
	memcpy(mgid.raw + 12, &grp.sin_addr, 4);
	check("MULTICAST_JOIN", ev->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	check("status", ev->status, 0);
	check("private data: the join's context", (long)(uintptr_t)ev->param.ud.private_data, 0x5eed);
	check("qp_num 0xffffff", ev->param.ud.qp_num, 0xffffff);
	check("qkey RDMA_UDP_QKEY", ev->param.ud.qkey, RDMA_UDP_QKEY);
	check("dgid: the IPv4-mapped group", !memcmp(ev->param.ud.ah_attr.grh.dgid.raw, mgid.raw, 16), 1);
	check("is_global", ev->param.ud.ah_attr.is_global, 1);
	rdma_ack_cm_event(ev);

	check("the QP was attached when the event was taken", ibv_detach_mcast(id->qp, &mgid, 0), 0);
	check("attach again", ibv_attach_mcast(id->qp, &mgid, 0), 0);
	check("leave", rdma_leave_multicast(id, (struct sockaddr *)&grp), 0);
	check("leave detached the QP", ibv_detach_mcast(id->qp, &mgid, 0), EINVAL);
	errno = 0;
	check("leave again: -1", rdma_leave_multicast(id, (struct sockaddr *)&grp), -1);
	check("leave again: EADDRNOTAVAIL", errno, EADDRNOTAVAIL);
	rdma_destroy_qp(id);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("bad: %d\n", bad);
	return bad != 0;
}
