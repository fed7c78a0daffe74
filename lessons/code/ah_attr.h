/*
 * ah_attr.h - what one side tells the other before an RC connection, and the address
 * vector (struct ibv_ah_attr) built from it. Used by 05_rc_loopback.c (chapter 5) and by
 * lab_common.h; tests/ah_attr_test.c checks it for InfiniBand and for RoCE.
 *
 * The rule (the course's own; rdma-core's ibv_rc_pingpong is simpler: it adds a GRH
 * whenever a GID was exchanged, -g, and gives it hop_limit 1):
 *   - InfiniBand: packets are routed inside the subnet by LID, so the peer's LID goes into
 *     `dlid`. A GRH (is_global = 1) is only needed to leave the subnet: here, when the
 *     peer's GID has another subnet prefix than ours.
 *   - RoCE (Ethernet link layer): there are no LIDs (they read 0); every packet carries
 *     a GRH, addressed by the peer's GID (its IP address) from our source GID index,
 *     with hop_limit 64 (RoCE v2's IP TTL: 1 would not cross a router).
 */
#ifndef AH_ATTR_H
#define AH_ATTR_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <infiniband/verbs.h>

/* What a peer must tell us to connect to it: its QP number, first PSN, LID and GID. */
struct conn_info {
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	union ibv_gid gid;
};

/*
 * A fresh random initial PSN (24 bits) for every new connection: a PSN that repeats from
 * one connection to the next lets a late packet of the old one be taken for new data.
 */
static inline uint32_t random_psn(void)
{
	uint32_t r;

	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = (uint32_t)time(NULL) * 2654435761u ^ (uint32_t)clock();
	return r & 0xffffff;
}

/* The hop limit of the GRH: a router decrements it; 1 would die at the first router. */
#define AH_HOP_LIMIT 64

/*
 * Fill `ah` to reach `peer` from our port `port_num`, whose link layer is `link_layer`
 * (IBV_LINK_LAYER_*), using our GID `sgid` at `sgid_index` (sgid_index < 0: no GID chosen).
 * Returns 0, or -1 with the reason in `why` (a static string) when the peer cannot be
 * reached this way.
 */
static inline int ah_attr_for(struct ibv_ah_attr *ah, uint8_t link_layer, uint8_t port_num,
			      int sgid_index, const union ibv_gid *sgid,
			      const struct conn_info *peer, const char **why)
{
	memset(ah, 0, sizeof(*ah));
	ah->port_num = port_num;
	ah->sl = 0;
	ah->src_path_bits = 0;
	if (link_layer == IBV_LINK_LAYER_ETHERNET) {
		if (sgid_index < 0) {
			*why = "RoCE needs a source GID: every packet carries a GRH";
			return -1;
		}
		ah->is_global = 1;
	} else {
		if (peer->lid == 0) {
			*why = "the peer has LID 0: no subnet manager has configured its port";
			return -1;
		}
		ah->dlid = peer->lid;
		ah->is_global = sgid_index >= 0 && sgid &&
				peer->gid.global.subnet_prefix != sgid->global.subnet_prefix;
	}
	if (ah->is_global) {
		ah->grh.dgid = peer->gid;
		ah->grh.sgid_index = (uint8_t)sgid_index;
		ah->grh.hop_limit = AH_HOP_LIMIT;
		ah->grh.traffic_class = 0;
		ah->grh.flow_label = 0;
	}
	return 0;
}

#endif /* AH_ATTR_H */
