# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.10.0
PREVIOUS_COMMIT=5fdfc20144783e4e4f2e1bb97a28e5f12f76dfe5
