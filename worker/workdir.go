package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetloop/jetloop/streams"
)

// maxFolderName bounds one work folder name, well under the 255 bytes a
// file name may have: a longer encoded name is cut and hashed.
const maxFolderName = 128

// sessionFile, in a work folder, names the session it belongs to.
const sessionFile = ".jetloop-session"

// workFolder is the session's work folder under root,
// <root>/<agent>/<session>, each name the subject token of the name
// (events.EncodeToken). A token longer than maxFolderName bytes (a session
// name of 43 bytes of escaped characters can be) becomes its first bytes,
// "~" and a hash of the name: still one folder per session, found from the
// session's record (its agent and session names) by the same function, and
// back to the session by the sessionFile written into it.
func workFolder(root string, ref streams.SessionRef) string {
	at, st, _ := strings.Cut(ref.Key(), ".")
	return filepath.Join(root, folderName(at, ref.Agent), folderName(st, ref.Session))
}

func folderName(token, name string) string {
	if len(token) <= maxFolderName {
		return token
	}
	h := sha256.Sum256([]byte(name))
	head := token[:maxFolderName-34]
	// Do not cut an escape (=XX) in two.
	if i := strings.LastIndexByte(head, '='); i >= len(head)-2 {
		head = head[:i]
	}
	return head + "~" + hex.EncodeToString(h[:16])
}

// makeWorkFolder creates the session's work folder, recording in it whose
// it is when its name was hashed.
func makeWorkFolder(root string, ref streams.SessionRef) (string, error) {
	dir := workFolder(root, ref)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	if strings.Contains(filepath.Base(dir), "~") || strings.Contains(filepath.Base(filepath.Dir(dir)), "~") {
		path := filepath.Join(dir, sessionFile)
		if _, err := os.Stat(path); err != nil {
			b, _ := json.Marshal(struct {
				Agent   string `json:"agent"`
				Session string `json:"session"`
			}{ref.Agent, ref.Session})
			if err := os.WriteFile(path, append(b, '\n'), 0o640); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}
