/*
 * 07_gid_table.c - chapter 7: InfiniBand vs RoCE, as the GID table shows it.
 *
 * For each port of the device: link layer, LID (meaningful on InfiniBand only), MTU,
 * and every valid GID table entry with its type (IB, RoCE v1, RoCE v2) and the network
 * interface it belongs to. On RoCE v2 the GID is the IP address of that interface
 * (IPv4 appears as ::ffff:a.b.c.d); that is what a RoCE v2 packet carries in its
 * IP header, inside UDP to port 4791.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 07_gid_table 07_gid_table.c -libverbs
 * Run:   ./07_gid_table [device]
 */
#include <net/if.h>
#include "lab_common.h"

static const char *gid_type_name(uint32_t t)
{
	switch (t) {
	case IBV_GID_TYPE_IB: return "IB";
	case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
	default: return "unknown";
	}
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_gid_entry *entries = NULL;
	char txt[INET6_ADDRSTRLEN], ifname[IF_NAMESIZE];
	ssize_t n, i;
	int ret = 1, chosen;
	union ibv_gid gid;
	uint8_t p;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	if (ibv_query_device(ctx, &da)) {
		FAIL("ibv_query_device: %s", strerror(errno));
		goto out;
	}
	printf("device %s\n", ibv_get_device_name(ctx->device));
	for (p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(ctx, p, &pa)) {
			FAIL("ibv_query_port(%u): %s", p, strerror(errno));
			goto out;
		}
		printf("port %u: link_layer %s, lid %u, sm_lid %u, active_mtu %d bytes, "
		       "gid_tbl_len %d\n",
		       p, pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
		       pa.lid, pa.sm_lid, 128 << pa.active_mtu, pa.gid_tbl_len);
		free(entries);
		entries = calloc((size_t)pa.gid_tbl_len * da.phys_port_cnt, sizeof(*entries));
		if (!entries) {
			FAIL("calloc");
			goto out;
		}
		/* All valid entries of all ports, in one call. */
		n = ibv_query_gid_table(ctx, entries, (size_t)pa.gid_tbl_len * da.phys_port_cnt,
					0);
		if (n < 0) {
			FAIL("ibv_query_gid_table: %s", strerror((int)-n));
			goto out;
		}
		for (i = 0; i < n; i++) {
			if (entries[i].port_num != p)
				continue;
			inet_ntop(AF_INET6, entries[i].gid.raw, txt, sizeof(txt));
			if (!entries[i].ndev_ifindex ||
			    !if_indextoname(entries[i].ndev_ifindex, ifname))
				strcpy(ifname, "-");
			printf("  gid[%2u] %-28s %-8s netdev %s\n", entries[i].gid_index, txt,
			       gid_type_name(entries[i].gid_type), ifname);
		}
		if (pick_gid(ctx, p, lab_netdev(), &chosen, &gid))
			goto out;
		inet_ntop(AF_INET6, gid.raw, txt, sizeof(txt));
		printf("port %u: connect QPs with gid index %d (%s)\n", p, chosen, txt);
	}
	printf("OK\n");
	ret = 0;
out:
	free(entries);
	if (ibv_close_device(ctx))
		ret = 1;
	return ret;
}
