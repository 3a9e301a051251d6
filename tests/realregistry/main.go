// The registry command of the CNCF distribution release pinned in go.mod, as that release's
// cmd/registry builds it, with only what the tests use registered: the filesystem storage
// driver and htpasswd authentication. One more command, `htpasswd USER` (the password on
// standard input), prints an htpasswd line with a bcrypt hash from the same bcrypt package
// the registry checks it with, so the tests need neither apache2-utils nor a Python bcrypt.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "htpasswd" {
		os.Exit(htpasswd(os.Args[2]))
	}
	// nolint:errcheck // as cmd/registry: its commands exit non-zero themselves on failure
	registry.RootCmd.Execute()
}

func htpasswd(user string) int {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(os.Stderr, "htpasswd: no password on standard input")
		return 2
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimRight(line, "\r\n")), bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, "htpasswd:", err)
		return 1
	}
	fmt.Printf("%s:%s\n", user, hash)
	return 0
}
