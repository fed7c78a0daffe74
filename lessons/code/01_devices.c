/*
 * 01_devices.c - chapter 1: what is on this machine?
 *
 * Lists every RDMA device libibverbs can see, then opens one (argv[1], default: the
 * first) and prints its limits and the attributes of each port.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 01_devices 01_devices.c -libverbs
 * Run:   ./01_devices [device]
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *link_layer_name(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
	default: return "unspecified";
	}
}

static int mtu_bytes(enum ibv_mtu m)
{
	/* IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 */
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

/* Lanes per link: the active_width codes of the InfiniBand spec. */
static int width_lanes(uint8_t w)
{
	switch (w) {
	case 1: return 1;
	case 2: return 4;
	case 4: return 8;
	case 8: return 12;
	case 16: return 2;
	default: return 0;
	}
}

/* Per-lane signalling: the active_speed codes, name and Gb/s per lane. */
static const char *speed_name(uint32_t s, double *gbps)
{
	switch (s) {
	case 1: *gbps = 2.5; return "SDR";
	case 2: *gbps = 5.0; return "DDR";
	case 4: *gbps = 10.0; return "QDR";
	case 8: *gbps = 10.3125; return "FDR10";
	case 16: *gbps = 14.0625; return "FDR";
	case 32: *gbps = 25.78125; return "EDR";
	case 64: *gbps = 50.0; return "HDR";
	case 128: *gbps = 100.0; return "NDR";
	default: *gbps = 0; return "unknown";
	}
}

static const char *atomic_name(enum ibv_atomic_cap c)
{
	switch (c) {
	case IBV_ATOMIC_NONE: return "none";
	case IBV_ATOMIC_HCA: return "within this device";
	case IBV_ATOMIC_GLOB: return "global";
	default: return "unknown";
	}
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : NULL;
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	struct ibv_context *ctx = NULL;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int n, i, ret = 1;
	uint8_t p;

	list = ibv_get_device_list(&n);
	if (!list) {
		fprintf(stderr, "FAIL: ibv_get_device_list: %s\n", strerror(errno));
		return 1;
	}
	printf("%d RDMA device(s)\n", n);
	for (i = 0; i < n; i++) {
		printf("  %-10s transport %-10s node %s guid 0x%016llx\n",
		       ibv_get_device_name(list[i]),
		       list[i]->transport_type == IBV_TRANSPORT_IB ? "IB" :
		       list[i]->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "other",
		       ibv_node_type_str(list[i]->node_type),
		       (unsigned long long)be64toh(ibv_get_device_guid(list[i])));
		if (!dev && (!want || strcmp(ibv_get_device_name(list[i]), want) == 0))
			dev = list[i];
	}
	if (!dev) {
		fprintf(stderr, "FAIL: no device %s\n", want ? want : "at all");
		goto out;
	}

	ctx = ibv_open_device(dev);
	if (!ctx) {
		fprintf(stderr, "FAIL: ibv_open_device: %s\n", strerror(errno));
		goto out;
	}
	if (ibv_query_device(ctx, &da)) {
		fprintf(stderr, "FAIL: ibv_query_device: %s\n", strerror(errno));
		goto out;
	}
	printf("device %s: fw %s, %u port(s)\n", ibv_get_device_name(dev),
	       da.fw_ver[0] ? da.fw_ver : "(none)", da.phys_port_cnt);
	printf("  max_qp %d max_qp_wr %d max_sge %d max_cq %d max_cqe %d\n", da.max_qp,
	       da.max_qp_wr, da.max_sge, da.max_cq, da.max_cqe);
	printf("  max_mr %d max_mr_size %llu max_pd %d max_srq %d max_mw %d\n", da.max_mr,
	       (unsigned long long)da.max_mr_size, da.max_pd, da.max_srq, da.max_mw);
	printf("  max_qp_rd_atom %d atomics %s\n", da.max_qp_rd_atom,
	       atomic_name(da.atomic_cap));

	for (p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(ctx, p, &pa)) {
			fprintf(stderr, "FAIL: ibv_query_port(%u): %s\n", p, strerror(errno));
			goto out;
		}
		printf("  port %u: state %s, link_layer %s, active_mtu %d (max %d), lid %u, "
		       "gid_tbl_len %d\n",
		       p, ibv_port_state_str(pa.state), link_layer_name(pa.link_layer),
		       mtu_bytes(pa.active_mtu), mtu_bytes(pa.max_mtu), pa.lid, pa.gid_tbl_len);
		{
			double lane;
			const char *sp = speed_name(pa.active_speed, &lane);
			int lanes = width_lanes(pa.active_width);

			printf("  port %u: %dX %s = %g Gb/s signalling (width code %u, speed "
			       "code %u)\n",
			       p, lanes, sp, lanes * lane, pa.active_width, pa.active_speed);
		}
	}
	printf("OK\n");
	ret = 0;
out:
	if (ctx && ibv_close_device(ctx)) {
		fprintf(stderr, "FAIL: ibv_close_device\n");
		ret = 1;
	}
	ibv_free_device_list(list);
	return ret;
}
