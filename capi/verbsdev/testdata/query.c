/* query: built against rdma-core's headers and linked with softrdma's
 * libibverbs.so.1, it goes through the paths a compiled program takes that the
 * stock tools do not all take: verbs.h's inline ibv_query_port (through
 * verbs_context.query_port), ibv_query_gid_ex, ibv_query_pkey, ibv_alloc_pd and
 * ibv_dealloc_pd, the inline data an RC QP takes, and a stubbed verb. It
 * prints one line per check. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

int main(int argc, char **argv)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) {
		printf("no devices\n");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(l[i]);
		if (!ctx) {
			printf("%s: open: %s\n", ibv_get_device_name(l[i]), strerror(errno));
			return 1;
		}
		struct ibv_port_attr pa;
		int rc = ibv_query_port(ctx, 1, &pa);
		printf("%s: port 1 rc=%d state=%d active_mtu=%d link_layer=%d gid_tbl_len=%d\n",
		       ibv_get_device_name(l[i]), rc, pa.state, pa.active_mtu, pa.link_layer, pa.gid_tbl_len);
		rc = ibv_query_port(ctx, 2, &pa);
		printf("%s: port 2 rc=%d\n", ibv_get_device_name(l[i]), rc);
		struct ibv_gid_entry ge;
		rc = ibv_query_gid_ex(ctx, 1, 1, &ge, 0);
		char buf[64] = "";
		if (!rc)
			inet_ntop(AF_INET6, ge.gid.raw, buf, sizeof(buf));
		printf("%s: gid_ex 1 rc=%d gid=%s type=%u\n", ibv_get_device_name(l[i]), rc, buf, rc ? 0 : ge.gid_type);
		__be16 pkey = 0;
		rc = ibv_query_pkey(ctx, 1, 0, &pkey);
		printf("%s: pkey 0 rc=%d pkey=0x%04x\n", ibv_get_device_name(l[i]), rc, ntohs(pkey));
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		printf("%s: alloc_pd %s\n", ibv_get_device_name(l[i]), pd ? "ok" : strerror(errno));
		if (!pd)
			return 1;
		errno = 0;
		struct ibv_pd *imp = ibv_import_pd(ctx, 1);
		printf("%s: stub import_pd %s errno=%d\n", ibv_get_device_name(l[i]), imp ? "non-NULL" : "NULL", errno);
		// The inline data an RC QP takes: rxe gives a send WQE's whole room
		// (16 bytes an SGE, or what was asked), siw SIW_MAX_INLINE (80)
		// whatever was asked and refuses more.
		struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		for (int want = 0; cq && want <= 81; want += 81) {
			struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1,
					.max_inline_data = want}};
			errno = 0;
			struct ibv_qp *qp = ibv_create_qp(pd, &ia);
			printf("%s: create_qp inline %d: %s errno=%d max_inline_data=%u max_send_sge=%u\n",
			       ibv_get_device_name(l[i]), want, qp ? "ok" : "NULL", qp ? 0 : errno,
			       qp ? ia.cap.max_inline_data : 0, qp ? ia.cap.max_send_sge : 0);
			if (qp)
				ibv_destroy_qp(qp);
		}
		if (cq)
			ibv_destroy_cq(cq);
		printf("%s: dealloc_pd rc=%d\n", ibv_get_device_name(l[i]), ibv_dealloc_pd(pd));
		printf("%s: close rc=%d\n", ibv_get_device_name(l[i]), ibv_close_device(ctx));
	}
	ibv_free_device_list(l);
	return 0;
}
