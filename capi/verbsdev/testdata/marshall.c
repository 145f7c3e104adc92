/* marshall: prints what ibv_copy_ah_attr_from_kern, ibv_copy_qp_attr_from_kern,
 * ibv_copy_path_rec_from_kern and ibv_copy_path_rec_to_kern write (each
 * destination, prefilled, as bytes, after a copy from a source filled with a
 * pattern), and ibv_get_sysfs_path's answer, after setting SYSFS_PATH to
 * argv[1] if given. The test compares what rdma-core's libibverbs prints with
 * the library's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>

/* rdma-core's <infiniband/marshall.h>, which Debian does not install. */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
/* rdma-core's <infiniband/driver.h>. */
const char *ibv_get_sysfs_path(void);

static void fill(void *p, size_t n, unsigned seed)
{
	unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed + 37 * i);
}

static void dump(const char *name, const void *p, size_t n)
{
	const unsigned char *b = p;
	printf("%s:", name);
	for (size_t i = 0; i < n; i++)
		printf("%s%02x", i % 32 ? " " : "\n ", b[i]);
	printf("\n");
}

int main(int argc, char **argv)
{
	struct ib_uverbs_ah_attr kah;
	struct ibv_ah_attr ah;
	fill(&kah, sizeof(kah), 1);
	memset(&ah, 0xa5, sizeof(ah));
	ibv_copy_ah_attr_from_kern(&ah, &kah);
	dump("ah_attr_from_kern", &ah, sizeof(ah));

	struct ib_uverbs_qp_attr kqp;
	struct ibv_qp_attr qp;
	fill(&kqp, sizeof(kqp), 2);
	memset(&qp, 0xa5, sizeof(qp));
	ibv_copy_qp_attr_from_kern(&qp, &kqp);
	dump("qp_attr_from_kern", &qp, sizeof(qp));

	struct ib_user_path_rec kpr;
	struct ibv_sa_path_rec pr;
	fill(&kpr, sizeof(kpr), 3);
	memset(&pr, 0xa5, sizeof(pr));
	ibv_copy_path_rec_from_kern(&pr, &kpr);
	dump("path_rec_from_kern", &pr, sizeof(pr));

	fill(&pr, sizeof(pr), 4);
	memset(&kpr, 0xa5, sizeof(kpr));
	ibv_copy_path_rec_to_kern(&kpr, &pr);
	dump("path_rec_to_kern", &kpr, sizeof(kpr));

	if (argc > 1)
		setenv("SYSFS_PATH", argv[1], 1);
	const char *s = ibv_get_sysfs_path();
	printf("sysfs path: %s\n", s ? s : "(NULL)");
	printf("again the same: %d\n", ibv_get_sysfs_path() == s);
	return 0;
}
