#!/usr/bin/env bash
# A real MariaDB server for the MySQL tests of `madengine database` (tests/test_database_mysql.py).
# Idempotent: installs mariadb-server when missing, starts it when it does not answer, and
# creates the test user, which may create and drop databases named madengine_test*.
# The tests read MADENGINE_TEST_MYSQL_URL (default below); the password is a local test value.
set -euo pipefail

USER_NAME=madengine_test
USER_PASSWORD=madengine-test-pw
DATABASE=madengine_test

if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
fi

answering() { mariadb-admin --protocol=socket -uroot ping >/dev/null 2>&1; }

if ! answering; then
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  service mariadb start >/dev/null 2>&1 || service mysql start >/dev/null 2>&1 || {
    # containers without an init system: the server's own supervisor, detached
    nohup mysqld_safe --user=mysql >/dev/null 2>&1 &
  }
  for _ in $(seq 1 60); do
    answering && break
    sleep 0.5
  done
  answering || { echo "20-mariadb.sh: MariaDB did not start" >&2; exit 1; }
fi

mariadb --protocol=socket -uroot <<SQL
CREATE USER IF NOT EXISTS '${USER_NAME}'@'localhost' IDENTIFIED BY '${USER_PASSWORD}';
CREATE USER IF NOT EXISTS '${USER_NAME}'@'127.0.0.1' IDENTIFIED BY '${USER_PASSWORD}';
ALTER USER '${USER_NAME}'@'localhost' IDENTIFIED BY '${USER_PASSWORD}';
ALTER USER '${USER_NAME}'@'127.0.0.1' IDENTIFIED BY '${USER_PASSWORD}';
GRANT ALL PRIVILEGES ON \`madengine\\_test%\`.* TO '${USER_NAME}'@'localhost';
GRANT ALL PRIVILEGES ON \`madengine\\_test%\`.* TO '${USER_NAME}'@'127.0.0.1';
CREATE DATABASE IF NOT EXISTS \`${DATABASE}\` CHARACTER SET utf8mb4;
FLUSH PRIVILEGES;
SQL
echo "20-mariadb.sh: MariaDB ready: mysql://${USER_NAME}:******@127.0.0.1:3306/${DATABASE}" >&2
