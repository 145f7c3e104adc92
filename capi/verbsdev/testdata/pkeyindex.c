/* pkeyindex: ibv_get_pkey_index on the first device's port 1: the default
 * P_Key 0xffff is at index 0, a P_Key not in the table gives a negative
 * value. Prints "default N absent M". */
#include <endian.h>
#include <stdio.h>
#include <infiniband/verbs.h>

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	printf("default %d absent %d\n", ibv_get_pkey_index(ctx, 1, htobe16(0xffff)),
	       ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) < 0 ? -1 : 0);
	return 0;
}
