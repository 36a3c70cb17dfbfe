# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.6.0
PREVIOUS_COMMIT=a30d75d9b50a187309c5a62d25c6c130c5437fe2
