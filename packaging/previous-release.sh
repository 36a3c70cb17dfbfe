# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.11.0
PREVIOUS_COMMIT=97f27d971a7f214dff3508d745272f42db5ff4a7
