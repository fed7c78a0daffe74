/*
 * 02_fabric.c - chapter 2: what kind of fabric is this port on?
 *
 * For each port of the device (argv[1], default: the first) it prints the physical
 * facts chapter 2 talks about and classifies the port:
 *   - InfiniBand: LID, subnet manager LID, LMC; without a subnet manager the port
 *     cannot become ACTIVE;
 *   - RoCE (Ethernet link layer): the network interface under it, its MTU and the
 *     RoCE MTU that follows from it, and whether the kernel listens on UDP port 4791
 *     (RoCE v2).
 * It also computes the link rate from width x lane speed and prints sysfs's own
 * `rate` file next to it.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 -o 02_fabric 02_fabric.c -libverbs
 * Run:   ./02_fabric [device]
 */
#include "lab_common.h"

/* Read the first line of a small text file into buf; returns 0 on success. */
static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -1;
	ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (!ok)
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static int lanes(uint8_t width)
{
	switch (width) {
	case 1: return 1;
	case 2: return 4;
	case 4: return 8;
	case 8: return 12;
	case 16: return 2;
	default: return 0;
	}
}

/*
 * One lane speed of InfiniBand (ibv_port_attr.active_speed). Three numbers that are easy to
 * mix up: the signalling rate on the wire, the data rate left after line encoding
 * (8b/10b up to QDR, 64b/66b from FDR on; HDR and NDR also carry FEC), and the kernel's
 * nominal rate, which is what sysfs `rate` multiplies by the width.
 */
struct lane_speed {
	const char *name;
	const char *encoding;
	double signal_gbps;
	double data_gbps;
	double nominal_gbps;
};

static const struct lane_speed *lane_speed(uint8_t speed)
{
	static const struct lane_speed table[] = {
		{ "SDR", "8b/10b", 2.5, 2.0, 2.5 },
		{ "DDR", "8b/10b", 5.0, 4.0, 5.0 },
		{ "QDR", "8b/10b", 10.0, 8.0, 10.0 },
		{ "FDR10", "64b/66b", 10.3125, 10.0, 10.0 },
		{ "FDR", "64b/66b", 14.0625, 13.64, 14.0 },
		{ "EDR", "64b/66b", 25.78125, 25.0, 25.0 },
		{ "HDR", "64b/66b + FEC, PAM4", 53.125, 50.0, 50.0 },
		{ "NDR", "64b/66b + FEC, PAM4", 106.25, 100.0, 100.0 },
	};
	int i;

	for (i = 0; i < 8; i++)
		if (speed == 1u << i)
			return &table[i];
	return NULL;
}

/*
 * Largest IB MTU the kernel allows on a RoCE netdev of this MTU (iboe_get_mtu): it keeps
 * room for the largest headers any RoCE packet can carry, 96 bytes: GRH 40 (IPv6-sized,
 * also for IPv4), UDP 8, BTH 12, XRC extended header 4, AtomicETH 28, ICRC 4.
 */
static int roce_mtu_for(int netdev_mtu)
{
	int m;

	for (m = 4096; m >= 256; m /= 2)
		if (m + 40 + 8 + 12 + 4 + 28 + 4 <= netdev_mtu)
			return m;
	return 0;
}

/* Does the kernel have a UDP socket bound to port 4791 (0x12B7)? */
static int udp_4791_listening(void)
{
	const char *files[] = { "/proc/net/udp", "/proc/net/udp6" };
	char line[512];
	size_t i;
	int found = 0;
	FILE *f;

	for (i = 0; i < 2 && !found; i++) {
		f = fopen(files[i], "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (strstr(line, ":12B7 ")) {
				found = 1;
				break;
			}
		fclose(f);
	}
	return found;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	const struct lane_speed *ls;
	char path[256], rate[128], ndev[64], mtu_txt[32];
	const char *name;
	int ret = 1, netdev_mtu;
	uint8_t p;

	ctx = open_device(argc > 1 ? argv[1] : NULL);
	if (!ctx)
		return 1;
	name = ibv_get_device_name(ctx->device);
	if (ibv_query_device(ctx, &da)) {
		FAIL("ibv_query_device: %s", strerror(errno));
		goto out;
	}
	for (p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(ctx, p, &pa)) {
			FAIL("ibv_query_port(%u): %s", p, strerror(errno));
			goto out;
		}
		printf("%s port %u: state %s, physical state %u%s\n", name, p,
		       ibv_port_state_str(pa.state), pa.phys_state,
		       pa.phys_state == 5 ? " (LinkUp)" : "");
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/rate", name, p);
		if (read_line(path, rate, sizeof(rate)))
			strcpy(rate, "(unreadable)");
		ls = lane_speed(pa.active_speed);
		if (!ls) {
			printf("  link: %dX, unknown lane speed code %u; sysfs rate: %s\n",
			       lanes(pa.active_width), pa.active_speed, rate);
		} else {
			printf("  link: %dX %s: per lane %g Gb/s signalling, %g Gb/s data (%s)\n",
			       lanes(pa.active_width), ls->name, ls->signal_gbps, ls->data_gbps,
			       ls->encoding);
			printf("  data rate %g Gb/s; sysfs rate: %s (nominal %g Gb/s x %d)\n",
			       lanes(pa.active_width) * ls->data_gbps, rate, ls->nominal_gbps,
			       lanes(pa.active_width));
		}

		if (pa.link_layer == IBV_LINK_LAYER_INFINIBAND) {
			printf("  fabric: InfiniBand; LID %u, LMC %u, subnet manager at LID %u "
			       "(SL %u)\n",
			       pa.lid, pa.lmc, pa.sm_lid, pa.sm_sl);
			if (pa.sm_lid == 0)
				printf("  no subnet manager has configured this port: it cannot "
				       "become ACTIVE\n");
			continue;
		}
		/* Ethernet: RoCE. The GID table's entry 0 names the network interface. */
		printf("  fabric: Ethernet (RoCE); LID %u and SM LID %u are unused\n", pa.lid,
		       pa.sm_lid);
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/0", name, p);
		if (read_line(path, ndev, sizeof(ndev))) {
			printf("  netdev: unknown (no gid_attrs/ndevs/0)\n");
			continue;
		}
		snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", ndev);
		netdev_mtu = read_line(path, mtu_txt, sizeof(mtu_txt)) ? 0 : atoi(mtu_txt);
		printf("  netdev %s, MTU %d -> largest RoCE MTU %d; port active_mtu %d\n", ndev,
		       netdev_mtu, roce_mtu_for(netdev_mtu), 128 << pa.active_mtu);
		printf("  UDP port 4791 (RoCE v2): %s\n",
		       udp_4791_listening() ? "a kernel socket is bound to it" :
					      "nothing bound to it");
	}
	printf("OK\n");
	ret = 0;
out:
	if (ibv_close_device(ctx))
		ret = 1;
	return ret;
}
