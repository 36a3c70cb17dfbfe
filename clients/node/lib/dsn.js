// libpq connection strings for node-postgres, which reads only URIs.

/**
 * The `pg.Client` configuration for a libpq connection string.
 *
 * A URI (`postgresql://...` or `postgres://...`) is passed on as `{ connectionString }`. The
 * keyword/value form (`host=127.0.0.1 port=5432 dbname='my db'`, quoted as libpq quotes: a value
 * in single quotes, a backslash escapes the next character) is parsed here. Keywords understood:
 * host, hostaddr, port, user, password, dbname, application_name, options, connect_timeout
 * (seconds), sslmode (disable, allow, prefer, require, verify-ca, verify-full). Any other keyword
 * is an error rather than silently ignored. Keywords left out fall back to node-postgres's own
 * defaults (the PGHOST, PGUSER, ... environment variables).
 *
 * @param {string} dsn a libpq connection string
 * @returns {object} a configuration for `new pg.Client(...)` / `new pg.Pool(...)`
 * @throws {TypeError} on a malformed string or an unsupported keyword
 */
export function connectionConfig(dsn) {
  if (typeof dsn !== 'string') throw new TypeError('dsn must be a string');
  if (/^postgres(ql)?:\/\//.test(dsn)) return { connectionString: dsn };
  const pairs = [];
  let i = 0;
  const skipSpace = () => { while (i < dsn.length && /\s/.test(dsn[i])) i += 1; };
  for (skipSpace(); i < dsn.length; skipSpace()) {
    let key = '';
    while (i < dsn.length && dsn[i] !== '=' && !/\s/.test(dsn[i])) key += dsn[i++];
    skipSpace();
    if (dsn[i] !== '=') throw new TypeError(`dsn: missing "=" after "${key}"`);
    i += 1;
    skipSpace();
    let value = '';
    if (dsn[i] === "'") {
      for (i += 1; ; i += 1) {
        if (i >= dsn.length) throw new TypeError('dsn: unterminated quoted value');
        if (dsn[i] === "'") { i += 1; break; }
        if (dsn[i] === '\\') i += 1;
        value += dsn[i] ?? '';
      }
    } else {
      for (; i < dsn.length && !/\s/.test(dsn[i]); i += 1) {
        if (dsn[i] === '\\') i += 1;
        value += dsn[i] ?? '';
      }
    }
    pairs.push([key, value]);
  }
  const config = {};
  for (const [key, value] of pairs) {
    switch (key) {
      case 'host': case 'hostaddr': config.host = value; break;
      case 'port': config.port = Number(value); break;
      case 'user': config.user = value; break;
      case 'password': config.password = value; break;
      case 'dbname': config.database = value; break;
      case 'application_name': config.application_name = value; break;
      case 'options': config.options = value; break;
      case 'connect_timeout': config.connectionTimeoutMillis = Number(value) * 1000; break;
      case 'sslmode':
        if (['disable', 'allow', 'prefer'].includes(value)) config.ssl = false;
        else if (value === 'require') config.ssl = { rejectUnauthorized: false };
        else if (['verify-ca', 'verify-full'].includes(value)) config.ssl = true;
        else throw new TypeError(`dsn: unknown sslmode "${value}"`);
        break;
      default: throw new TypeError(`dsn: keyword "${key}" is not supported`);
    }
  }
  return config;
}
