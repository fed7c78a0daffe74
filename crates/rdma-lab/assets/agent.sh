#!/bin/busybox sh
# The multi-host lab's command agent (built by crates/rdma-lab). init.sh serves it with
# `nc -ll -p 7001 -e` on every host: one request per connection, one line holding a shell
# script in base64. It runs the script (stdin empty, stderr with stdout) and ends the
# answer with `LAB-AGENT-EXIT=N`. The host's lab controller reaches it through qemu's user
# network (a host-forwarded port on 127.0.0.1), so it works while the fabric link is down.
read -r line || exit 0
f=$(mktemp /tmp/agent.XXXXXX)
if ! echo "$line" | base64 -d > "$f" 2> /dev/null; then
    echo "lab agent: the request is not base64"
    echo "LAB-AGENT-EXIT=126"
    rm -f "$f"
    exit 0
fi
sh "$f" < /dev/null 2>&1
echo "LAB-AGENT-EXIT=$?"
rm -f "$f"
