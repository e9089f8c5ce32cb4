#!/bin/sh
# Installs and starts the sockferry LaunchAgent for the current user on macOS (doc/MACOS.md).
#
#   packaging/launchd/install.sh [--sockferry PATH]   install ~/Library/LaunchAgents/sockferry.relay.plist, start it
#   packaging/launchd/install.sh --uninstall          stop it and remove the plist
#   packaging/launchd/install.sh --print [--sockferry PATH]   write the filled plist to stdout only
#
# launchd expands neither ~ nor $HOME and runs the program without a login PATH, so the
# template gets absolute paths here: the binary (default: sockferry on PATH) and $HOME.
set -eu

label=sockferry.relay
here=$(cd "$(dirname "$0")" && pwd)
usage() {
        echo "usage: $0 [--sockferry PATH] [--print | --uninstall]" >&2
        exit 64
}
sockferry=
mode=install
while [ $# -gt 0 ]; do
        case $1 in
        --sockferry) [ $# -ge 2 ] || usage; sockferry=$2; shift 2 ;;
        --print) mode=print; shift ;;
        --uninstall) mode=uninstall; shift ;;
        *) usage ;;
        esac
done
case ${HOME:-} in
/*) ;;
*) echo "$0: HOME ('${HOME:-}') is not an absolute path" >&2; exit 1 ;;
esac

plist=$HOME/Library/LaunchAgents/$label.plist
logdir=$HOME/Library/Logs/sockferry
conf=$HOME/.config/sockferry/sockferry.conf

if [ "$mode" = uninstall ]; then
        launchctl bootout "gui/$(id -u)/$label" 2>/dev/null || true
        rm -f "$plist"
        echo "$label stopped and removed; $conf and $logdir are left in place"
        exit 0
fi

if [ -z "$sockferry" ]; then
        sockferry=$(command -v sockferry) || {
                echo "$0: sockferry is not on PATH: give --sockferry /path/to/sockferry" >&2; exit 1; }
fi
case $sockferry in
/*) ;;
*) echo "$0: --sockferry $sockferry: launchd needs an absolute path" >&2; exit 64 ;;
esac
case $sockferry$HOME in
*"
"*) echo "$0: a path holds a newline" >&2; exit 64 ;;
esac

# XML text, then a sed replacement: & < > become entities, then \ & | are escaped for sed.
fill_value() {
        printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/[\\&|]/\\&/g'
}
fill() {
        sed -e "s|@SOCKFERRY@|$(fill_value "$sockferry")|g" -e "s|@HOME@|$(fill_value "$HOME")|g" \
                "$here/sockferry.relay.plist.in"
}

if [ "$mode" = print ]; then
        fill
        exit 0
fi

[ "$(uname -s)" = Darwin ] || { echo "$0: installs a LaunchAgent: macOS only (--print works anywhere)" >&2; exit 1; }
[ -x "$sockferry" ] || { echo "$0: $sockferry is not an executable file" >&2; exit 1; }
[ -f "$conf" ] || {
        echo "$0: $conf does not exist: write it first (doc/MACOS.md, \"Configuration\")" >&2; exit 1; }
mkdir -p "$HOME/Library/LaunchAgents" "$logdir"
fill >"$plist.new"
plutil -lint -s "$plist.new"
mv "$plist.new" "$plist"
# A loaded job keeps its old definition: unload it first (no error if it was not loaded).
launchctl bootout "gui/$(id -u)/$label" 2>/dev/null || true
launchctl bootstrap "gui/$(id -u)" "$plist"
echo "$label started: $sockferry relay -c $conf"
echo "log: $logdir/sockferry.log; state: launchctl print gui/$(id -u)/$label"
