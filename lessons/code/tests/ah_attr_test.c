/*
 * ah_attr_test.c - unit test of ah_attr_for() (../ah_attr.h) for InfiniBand and RoCE.
 * Needs no RDMA device: it only builds address vectors. tests/lessons-build runs it.
 */
#include <arpa/inet.h>
#include "../ah_attr.h"

static int failures;

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
			failures++;                                                        \
		}                                                                          \
	} while (0)

static union ibv_gid gid_of(const char *text)
{
	union ibv_gid g;

	memset(&g, 0, sizeof(g));
	if (inet_pton(AF_INET6, text, g.raw) != 1) {
		fprintf(stderr, "FAIL: bad GID literal %s\n", text);
		failures++;
	}
	return g;
}

int main(void)
{
	struct ibv_ah_attr ah;
	const char *why = NULL;
	union ibv_gid mine = gid_of("fe80::2:c903:a:1b01");
	struct conn_info peer = { .qpn = 0x11, .psn = 0x22, .lid = 7,
				  .gid = gid_of("fe80::2:c903:a:1b02") };

	/* InfiniBand, same subnet: the LID routes, no GRH. */
	CHECK(ah_attr_for(&ah, IBV_LINK_LAYER_INFINIBAND, 1, 0, &mine, &peer, &why) == 0);
	CHECK(ah.dlid == 7);
	CHECK(ah.is_global == 0);
	CHECK(ah.port_num == 1);

	/* InfiniBand, no GID chosen at all: still the LID. */
	CHECK(ah_attr_for(&ah, IBV_LINK_LAYER_INFINIBAND, 1, -1, NULL, &peer, &why) == 0);
	CHECK(ah.dlid == 7 && ah.is_global == 0);

	/* InfiniBand, the peer in another subnet: LID plus a GRH with a real hop limit. */
	peer.gid = gid_of("fec0:0:0:1:2:c903:a:1b02");
	CHECK(ah_attr_for(&ah, IBV_LINK_LAYER_INFINIBAND, 1, 0, &mine, &peer, &why) == 0);
	CHECK(ah.dlid == 7 && ah.is_global == 1);
	CHECK(memcmp(ah.grh.dgid.raw, peer.gid.raw, 16) == 0);
	CHECK(ah.grh.sgid_index == 0 && ah.grh.hop_limit == AH_HOP_LIMIT);

	/* InfiniBand, peer port without a LID (no subnet manager): refused, with a reason. */
	peer.lid = 0;
	why = NULL;
	CHECK(ah_attr_for(&ah, IBV_LINK_LAYER_INFINIBAND, 1, 0, &mine, &peer, &why) == -1);
	CHECK(why != NULL && strstr(why, "LID 0") != NULL);

	/* RoCE: no LID (0), always a GRH to the peer's GID from our GID index. */
	mine = gid_of("::ffff:10.2.0.1");
	peer.gid = gid_of("::ffff:10.2.0.2");
	CHECK(ah_attr_for(&ah, IBV_LINK_LAYER_ETHERNET, 1, 3, &mine, &peer, &why) == 0);
	CHECK(ah.dlid == 0 && ah.is_global == 1);
	CHECK(memcmp(ah.grh.dgid.raw, peer.gid.raw, 16) == 0);
	CHECK(ah.grh.sgid_index == 3 && ah.grh.hop_limit == AH_HOP_LIMIT);

	/* RoCE without a source GID: refused. */
	why = NULL;
	CHECK(ah_attr_for(&ah, IBV_LINK_LAYER_ETHERNET, 1, -1, NULL, &peer, &why) == -1);
	CHECK(why != NULL && strstr(why, "GRH") != NULL);

	if (failures) {
		fprintf(stderr, "ah_attr_test: %d checks failed\n", failures);
		return 1;
	}
	printf("ah_attr_test: ok (InfiniBand and RoCE address vectors)\n");
	return 0;
}
