# The Go environment of the Go example worker (sourced by install.sh and test.sh,
# not run): GOPATH mode against the Debian-packaged sources in /usr/share/gocode,
# since the Go module proxy is not reachable. GOCACHE stays Go's default
# ($HOME/.cache/go-build) unless the caller set it; GOFLAGS=-mod= is cleared so
# that no module setting of the caller's leaks in.
export GOPATH=/usr/share/gocode
export GO111MODULE=off
export GOFLAGS=
export GOTOOLCHAIN=local
export PATH="/usr/lib/go/bin:$PATH"
