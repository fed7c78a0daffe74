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

static double lane_gbps(uint8_t speed)
{
	switch (speed) {
	case 1: return 2.5;
	case 2: return 5.0;
	case 4: return 10.0;
	case 8: return 10.3125;
	case 16: return 14.0625;
	case 32: return 25.78125;
	case 64: return 50.0;
	case 128: return 100.0;
	default: return 0.0;
	}
}

/* Largest IB MTU whose RoCE v2 packet (IPv4 20 + UDP 8 + BTH 12 + ICRC 4) fits. */
static int roce_mtu_for(int netdev_mtu)
{
	int m;

	for (m = 4096; m >= 256; m /= 2)
		if (m + 20 + 8 + 12 + 4 <= netdev_mtu)
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
		printf("  link: %dX x %g Gb/s per lane = %g Gb/s; sysfs rate: %s\n",
		       lanes(pa.active_width), lane_gbps(pa.active_speed),
		       lanes(pa.active_width) * lane_gbps(pa.active_speed), rate);

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
