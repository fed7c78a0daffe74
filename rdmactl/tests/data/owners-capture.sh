C=/sys/fs/cgroup
[ -e $C/cgroup.controllers ] || mount -t cgroup2 none $C
echo +rdma > $C/cgroup.subtree_control
mkdir -p $C/job-a.scope $C/job-b.scope
B=/opt/rdma/extra/owners_scale
(sleep 90 | sh -c "echo \$\$ > $C/job-a.scope/cgroup.procs; exec $B --hold 5 2" > /tmp/a.out) &
(sleep 90 | sh -c "echo \$\$ > $C/job-b.scope/cgroup.procs; exec $B --hold 3 0" > /tmp/b.out) &
for i in $(seq 600); do grep -q HELD /tmp/a.out 2>/dev/null && grep -q HELD /tmp/b.out 2>/dev/null && break; sleep 0.1; done
cat /tmp/a.out /tmp/b.out
echo "=== rdma"
rdma -j res show qp
echo
echo "=== exposition"
/opt/rdma/bin/rdmad --once --collector.disable-defaults --collector.netlink_owners --collector.netlink_owners.pid
echo "=== end"
