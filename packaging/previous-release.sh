# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.8.0
PREVIOUS_COMMIT=0b2a12b1d049a79a5ee27d5dea5cba3d7ed40d91
