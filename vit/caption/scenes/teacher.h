#pragma once
// --teacher: a ViT classifier of Fashion-MNIST's ten classes (vitk train; the bundled
// vit/models/fmnist-vit.h5) distilled onto the article loss (vit/caption/scenes/losses.h): before
// the first step it reads each training article's box, as the scene file drew it, and its logits
// take a share --distillation-alpha of each noun's article loss.
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/tokenizer.h"
#include "vit/caption/scenes/guides.h"
#include "vit/caption/scenes/losses.h"

namespace vitk::caption {
class CaptionTask;
}

namespace vitk::caption::scenes {

// The token of each class of a Fashion-MNIST classifier, from its class names ("T-shirt/top" is
// the scenes' "t-shirt", put in `names` when given): the first piece of the noun's last word, the
// piece named_cells finds in a caption. vitk::UsageError naming `teacher` and the class that is not
// an article of the scenes.
std::vector<int32_t> teacher_tokens(const datasets::Tokenizer& tokenizer,
                                    const std::vector<std::string>& class_names,
                                    const std::string& teacher,
                                    std::vector<std::string>* names = nullptr);

// What the teacher said of the training scenes.
struct TeacherLabels {
  ArticleTeacher teacher;  // the classes' tokens, and the distillation's settings
  // [image] -> the logits of each of its objects, objects x classes
  std::vector<std::vector<float>> logits;
  int64_t articles = 0, agrees = 0;  // the articles it read, and those its top class names as
                                     // the scene does
  double seconds = 0;                // the time it took, loading included
};

// Reads every article of the task's training scenes through the classifier at `path`, checked
// against the captioner and against the nouns of the training captions (`points`);
// `distillation`'s alpha, tau and hard are kept. vitk::UsageError naming --teacher and the file.
TeacherLabels read_teacher(const CaptionTask& task, const std::string& path,
                           const ArticleTeacher& distillation, const GuidePoints& points);

}  // namespace vitk::caption::scenes
