/* rates: prints ibv_rate_to_mult, ibv_rate_to_mbps for every enum ibv_rate
 * value (and a few past the last), and mult_to_ibv_rate, mbps_to_ibv_rate for
 * every multiplier and rate in Mb/s they can name (and some they cannot).
 * The test compares what rdma-core's libibverbs prints with the library's. */
#include <stdio.h>
#include <infiniband/verbs.h>

int main(void)
{
	for (int r = 0; r <= 26; r++)
		printf("rate %d: mult %d mbps %d\n", r, ibv_rate_to_mult(r), ibv_rate_to_mbps(r));
	for (int m = 0; m <= 500; m++)
		printf("mult %d: rate %d\n", m, (int)mult_to_ibv_rate(m));
	static const int mbps[] = {0, 1, 2500, 5000, 10000, 14062, 20000, 25781, 28125, 30000, 40000, 53125,
				   56250, 60000, 80000, 103125, 112500, 120000, 168750, 206250, 309375,
				   425000, 637500, 850000, 1275000, 1275001, 99999};
	for (unsigned i = 0; i < sizeof(mbps) / sizeof(mbps[0]); i++)
		printf("mbps %d: rate %d\n", mbps[i], (int)mbps_to_ibv_rate(mbps[i]));
	return 0;
}
