# mk.sh NAME SRC(worktree dir) : copy fabrika of SRC's working tree, instrument it
rm -rf /tmp/sbx2/$1 && mkdir -p /tmp/sbx2/$1 && cp -r $2/fabrika /tmp/sbx2/$1/ && find /tmp/sbx2/$1 -name __pycache__ -prune -exec rm -rf {} + ; python3 /tmp/sbx2/instr.py /tmp/sbx2/$1
