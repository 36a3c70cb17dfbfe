# Shell functions shared by the install scripts of the examples and the
# benchmark's peers (sourced, not run). Debian 12, as root; idempotent.

# need_node MIN WHO: Node.js and npm from Debian's packages when either is
# missing (a Node.js already installed is kept), then fail unless its major
# version is at least MIN. WHO names the caller in the error.
need_node() {
    local min="$1" who="$2" major
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
    fi
    major="$(node -p 'process.versions.node.split(".")[0]')"
    if [ "$major" -lt "$min" ]; then
        echo "$who needs Node.js $min or newer, found $(node --version)" >&2
        exit 1
    fi
}

# python_venv VENV: Debian's python3 with its venv module, and a virtual
# environment at VENV made with Debian's interpreter (not whatever python3
# comes first on PATH, pyenv say: the venv must keep working for every user
# and shell), made anew when it is missing or its interpreter no longer
# runs. Sets venv_made to yes when it made the venv anew, else to no.
python_venv() {
    local venv="$1"
    venv_made=no
    if ! dpkg-query -W -f='${Status}\n' python3-venv 2>/dev/null | grep -qx 'install ok installed'; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv
    fi
    if ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
        /usr/bin/python3 -m venv --clear "$venv"
        venv_made=yes
    fi
}

# pip_install_locked VENV REQUIREMENTS: every file checked against the lock's
# hashes, wheels only; pip skips what is already installed.
pip_install_locked() {
    "$1/bin/pip" install --quiet --disable-pip-version-check --require-hashes --only-binary=:all: \
        -r "$2"
}
