# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.5.0
PREVIOUS_COMMIT=43a6ebe0430dc76f4eab9d09c0665cd64715198d
