# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.9.0
PREVIOUS_COMMIT=37660ab7b8613b54128c71d5647675373a3d8126
