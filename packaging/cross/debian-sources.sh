# Sourced (bash) by packaging/cross/common.sh and packaging/linux/build-static.sh.
# debian_sources KIND: one "KIND [signed-by=...] URI SUITE COMPONENT" line (KIND deb or deb-src)
# for each Debian repository the system uses, read from apt-cache policy, so a CI mirror or a
# snapshot configured there is used as is. A private apt state (Dir::State, Dir::Etc::SourceList)
# then reads them without touching the system's apt configuration.
debian_sources() {
        local keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed_by=
        [ -r "$keyring" ] && signed_by="[signed-by=$keyring] "
        apt-cache policy | awk -v kind="$1" -v sb="$signed_by" '
                /^ *[0-9]+ [a-z+]+:\/\/[^ ]+ [^ ]+\/[^ ]+ [^ ]+ Packages$/ {
                        split($3, s, "/"); repo = $2 " " s[1] " " s[2]; next }
                /^ +release / && repo != "" && /o=Debian,/ { print kind " " sb repo }
                { repo = "" }' | sort -u
}
