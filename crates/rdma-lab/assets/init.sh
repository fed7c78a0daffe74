#!/bin/busybox sh
# PID 1 of the Soft-RoCE lab VM (built by crates/rdma-lab). It owns: mounts, kernel
# modules, networking, the rxe devices, running the payload, reporting the payload's exit
# code on the kernel console (ttyS0) and powering off. The payload talks on ttyS1, which the
# host connects to its own stdio, so its output is never mixed with kernel messages.
/bin/busybox mkdir -p /bb /proc /sys /dev /tmp /run
/bin/busybox --install -s /bb
export PATH=/opt/rdma/bin:/opt/rdma/examples:/usr/sbin:/usr/bin:/sbin:/bin:/bb
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /var/log /var/run
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
CONSOLE=/dev/ttyS0
IO=/dev/ttyS1

finish() {
    echo "LAB-EXIT-CODE=$1" > $CONSOLE
    sync
    poweroff -f
    sleep 5
}
fail() {
    echo "LAB-ERROR=$*" > $CONSOLE
    echo "lab: $*" > $IO
    finish 125
}

# The whole image lives in the initramfs: when it did not fit in RAM the kernel unpacked only
# part of it and every later step fails in ways that hide why. Say it once, plainly.
if dmesg 2>/dev/null | grep -q "Initramfs unpacking failed"; then
    fail "the initramfs did not fit in the VM's memory (dmesg: Initramfs unpacking failed); give the VM more (--memory)"
fi

MODE=run DEVICES=1 RXE=1 PORT=9736 HOSTS=1 HOST=1
for opt in $(cat /proc/cmdline); do
    case "$opt" in
        lab.mode=*) MODE=${opt#lab.mode=} ;;
        lab.hosts=*) HOSTS=${opt#lab.hosts=} ;;
        lab.host=*) HOST=${opt#lab.host=} ;;
        lab.devices=*) DEVICES=${opt#lab.devices=} ;;
        lab.rxe=*) RXE=${opt#lab.rxe=} ;;
        lab.port=*) PORT=${opt#lab.port=} ;;
    esac
done

while read -r ko; do
    case "$ko" in
        */rdma_rxe.ko) [ "$RXE" = 1 ] || continue ;;
    esac
    insmod "$ko" 2> /tmp/insmod.err || fail "insmod $ko: $(cat /tmp/insmod.err)"
done < /etc/lab/modules

hostname lab
ip link set lo up
ip link set eth0 up || fail "no eth0: virtio_net did not come up"
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2

# The multi-host lab (lab.hosts=N >= 2): eth1 is this host's port on the fabric (one L2
# segment through the lab's switch on the host); rxe0 sits on it. eth0 (qemu user net) only
# carries the host-forwarded ports and the controller (10.0.2.100:7000 by guestfwd).
RXE_NETDEV=eth0
if [ "$HOSTS" -ge 2 ]; then
    export LAB_HOST=h$HOST LAB_HOSTS=$HOSTS
    hostname $LAB_HOST
    ip link set eth1 up || fail "no eth1: the fabric NIC did not come up"
    ip addr add 10.2.0.$HOST/24 dev eth1
    RXE_NETDEV=eth1
    {
        echo "127.0.0.1 localhost"
        k=1
        while [ $k -le $HOSTS ]; do
            echo "10.2.0.$k h$k.lab h$k"
            k=$((k + 1))
        done
    } > /etc/hosts
    echo "nameserver 10.2.0.1" > /etc/resolv.conf
    echo "search lab" >> /etc/resolv.conf
    printf 'host=%s\nhosts=%s\n' $LAB_HOST $HOSTS > /etc/lab/fabric
    if [ "$HOST" = 1 ]; then
        # DNS for the fabric: every host name, the group name rdmad.lab with every host's
        # address (like a headless Service), and one SRV record per host for rdmad's probe
        # listener (port 9737, --probe.listen=:9737 as in deploy/; $PORT is rdmad's web port).
        k=1
        : > /etc/lab/dns-hosts
        set -- --keep-in-foreground --no-resolv --no-hosts --addn-hosts=/etc/lab/dns-hosts \
            --listen-address=10.2.0.1 --bind-interfaces --domain=lab --local=/lab/ \
            --user=root --group=root --log-facility=/var/log/dnsmasq.log --pid-file=
        while [ $k -le $HOSTS ]; do
            echo "10.2.0.$k h$k.lab h$k" >> /etc/lab/dns-hosts
            echo "10.2.0.$k rdmad.lab" >> /etc/lab/dns-hosts
            set -- "$@" --srv-host=_rdmad-probe._tcp.rdmad.lab,h$k.lab,9737,0,1
            k=$((k + 1))
        done
        dnsmasq "$@" > /var/log/dnsmasq.out 2>&1 &
    fi
    nc -ll -p 7001 -e /etc/lab/agent > /dev/null 2>&1 &
fi

RXE_DEVICES=""
if [ "$RXE" = 1 ]; then
    rdma link add rxe0 type rxe netdev $RXE_NETDEV || fail "rdma link add rxe0 type rxe netdev $RXE_NETDEV failed"
    RXE_DEVICES="rxe0"
fi
if [ "$DEVICES" -ge 2 ]; then
    # Two rxe devices on a veth pair in one namespace: without these policy rules the
    # kernel routes 10.1.0.x locally over lo and the QPs never reach RTR.
    ip link add veth0 type veth peer name veth1 || fail "cannot create the veth pair"
    ip addr add 10.1.0.1/24 dev veth0
    ip addr add 10.1.0.2/24 dev veth1
    ip link set veth0 up
    ip link set veth1 up
    for k in all veth0 veth1; do
        sysctl -qw net.ipv4.conf.$k.accept_local=1 net.ipv4.conf.$k.rp_filter=0
    done
    ip rule add pref 10 iif lo to 10.1.0.2 lookup 100
    ip rule add pref 11 iif lo to 10.1.0.1 lookup 101
    ip route add 10.1.0.2 dev veth0 src 10.1.0.1 table 100
    ip route add 10.1.0.1 dev veth1 src 10.1.0.2 table 101
    ip rule del pref 0 lookup local
    ip rule add pref 1000 lookup local
    if [ "$RXE" = 1 ]; then
        rdma link add rxe_a type rxe netdev veth0 || fail "rdma link add rxe_a failed"
        rdma link add rxe_b type rxe netdev veth1 || fail "rdma link add rxe_b failed"
        RXE_DEVICES="$RXE_DEVICES rxe_a rxe_b"
    fi
fi

for dev in $RXE_DEVICES; do
    i=0
    until grep -q ACTIVE /sys/class/infiniband/$dev/ports/1/state 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 300 ] && fail "$dev port 1 did not become ACTIVE in 15 s"
        usleep 50000
    done
done
if [ "$RXE" = 1 ] && [ "$HOSTS" = 1 ]; then
    # qemu's user network answers the router solicitation, so eth0 gets a site-local
    # fec0:: address by SLAAC ~0.5-1 s after link up, and rxe0 a third GID with it. Wait
    # for it (bounded) so that every command sees the same GID table from its start.
    i=0
    until [ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/2 2>/dev/null)" != "0000:0000:0000:0000:0000:0000:0000:0000" ]; do
        i=$((i + 1))
        if [ $i -gt 100 ]; then
            echo "lab: no SLAAC address on eth0 after 5 s; rxe0 has 2 GIDs only" > $CONSOLE
            break
        fi
        usleep 50000
    done
fi
echo "LAB-READY devices=$RXE_DEVICES uptime=$(cut -d" " -f1 /proc/uptime)" > $CONSOLE

cd /root
if [ "$HOSTS" -ge 2 ]; then
    rdmad --web.listen-address=0.0.0.0:$PORT > /var/log/rdmad.log 2>&1 &
    if [ "$MODE" = run ]; then
        # Start the command only when every host of the fabric is ACTIVE.
        echo wait-ready | nc 10.0.2.100 7000 > /tmp/ready 2>&1
        grep -q '^ok' /tmp/ready || fail "the lab controller did not report the fabric ready: $(cat /tmp/ready)"
        stty -F $IO -opost 2>/dev/null
        sh /opt/rdma/cmd < /dev/null > $IO 2>&1
        finish $?
    fi
    # Shell (h1 of `lab up`) or idle host: a login shell on ttyS1, again after each exit on
    # idle hosts (`rdmactl lab ssh hK` attaches to it).
    if [ "$MODE" = shell ]; then
        {
            echo
            echo "  Multi-host lab: this is $LAB_HOST of h1..h$HOSTS; rxe0 is on eth1 (10.2.0.$HOST),"
            echo "  the fabric. Other hosts: ping h2, nslookup rdmad.lab, ib_write_bw -d rxe0 -x 1 h2."
            echo "  Faults from here: rdmactl lab fault link h2 down | netem h2 loss 5% | kill h3 ..."
            echo "  Other hosts' shells: rdmactl lab ssh h2 (on the machine running the lab)."
        } > $IO
    fi
    if [ "$MODE" = shell ]; then
        setsid -c sh -l < $IO > $IO 2>&1
        finish $?
    fi
    while true; do
        setsid -c sh -l < $IO > $IO 2>&1
        sleep 1
    done
fi
if [ "$MODE" = shell ]; then
    rdmad --web.listen-address=0.0.0.0:$PORT > /var/log/rdmad.log 2>&1 &
    cat /etc/lab/motd > $IO
    setsid -c sh -l < $IO > $IO 2>&1
    finish $?
fi

# Run mode: raw output (no CR before LF), no input.
stty -F $IO -opost 2>/dev/null
sh /opt/rdma/cmd < /dev/null > $IO 2>&1
finish $?
