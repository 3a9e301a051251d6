// The gitea command of the release pinned in go.mod, as that release's own main.go builds it:
// the same app, the same markup renderers registered. Version is set by build.sh's ldflags.
package main

import (
	"os"
	"runtime"
	"strings"
	"time"

	"gitea.dev/cmd"
	"gitea.dev/modules/log"
	"gitea.dev/modules/setting"

	_ "gitea.dev/modules/markup/console"
	_ "gitea.dev/modules/markup/csv"
	_ "gitea.dev/modules/markup/jupyter"
	_ "gitea.dev/modules/markup/markdown"
	_ "gitea.dev/modules/markup/orgmode"

	"github.com/urfave/cli/v3"
)

var (
	Version = "development"
	Tags    = ""
)

func init() {
	setting.AppVer = Version
	setting.AppBuiltWith = formatBuiltWith()
	setting.AppStartTime = time.Now().UTC()
}

func main() {
	cli.OsExiter = func(code int) {
		log.GetManager().Close()
		os.Exit(code)
	}
	app := cmd.NewMainApp(cmd.AppVersion{Version: Version, Extra: formatBuiltWith()})
	_ = cmd.RunMainApp(app, os.Args...)
	// Queued logs are lost unless flushed before exiting.
	log.GetManager().Close()
}

func formatBuiltWith() string {
	version := runtime.Version()
	if len(Tags) == 0 {
		return " built with " + version
	}
	return " built with " + version + " : " + strings.ReplaceAll(Tags, " ", ", ")
}
