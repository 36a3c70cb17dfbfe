# The release before this one, as scripts/package-test.sh builds its package
# to upgrade from (sourced). Bump both when a release is frozen: the commit
# is the source the previous release's install script was generated from.
PREVIOUS_VERSION=0.7.0
PREVIOUS_COMMIT=70af116322d27075a0dbc4b0acac255dc7ce074d
